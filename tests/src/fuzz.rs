//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs` call them under libFuzzer;
//! `tests/tests/fuzz_corpora.rs` replays every file of `fuzz/corpus/` through them in the test
//! suite). Each takes arbitrary bytes, hands them to one parser the way a host, a network peer
//! or a file would, and checks what the parser accepted against the limits it was given: a
//! parser may refuse anything, but must never panic, and what it accepts must be in bounds.

pub mod firmware_commands;
mod input;
pub mod tcp_auth;
pub mod tcp_connection;

pub use firmware_commands::firmware_commands;
pub use tcp_auth::tcp_auth;
pub use tcp_connection::tcp_connection;

use std::io::Cursor;
use std::path::Path;

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::ns_config::{NsConfig, NsLimits};
use sagessd_abi::sampled_ids::SampledIdsView;
use sagessd_abi::subgraph::SubgraphView;
use sagessd_abi::tcp::Framing;
use sagessd_abi::tcp::stream::read_pdu;

/// A fuzz target: its name (the `fuzz/fuzz_targets/` file and the corpus folder) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in corpus-folder order.
pub const TARGETS: &[Target] = &[
    ("auth_messages", auth_messages),
    ("dataset_manifest", dataset_manifest),
    ("device_image", device_image),
    ("edge_list", edge_list),
    ("firmware_commands", firmware_commands),
    ("graph_descriptor", graph_descriptor),
    ("hw_config", hw_config),
    ("npy", npy),
    ("ns_config", ns_config),
    ("sampled_ids", sampled_ids),
    ("subgraph", subgraph),
    ("tcp_pdus", tcp_pdus),
    ("tcp_auth", tcp_auth),
    ("tcp_connection", tcp_connection),
];

/// Little-endian `u64` from the first 8 bytes of `data` (missing bytes are 0), and the rest.
fn take_u64(data: &[u8]) -> (u64, &[u8]) {
    let n = data.len().min(8);
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&data[..n]);
    (u64::from_le_bytes(b), &data[n..])
}

/// An NS_config payload checked against limits and a node count taken from its first bytes:
/// an accepted config has no more targets than the limit, every target inside the graph, and
/// every fanout within the limit; its minibatches (one, or a hyperbatch's, at most the limit)
/// are each non-empty and together its targets, in order.
pub fn ns_config(data: &[u8]) {
    let (word, rest) = take_u64(data);
    let limits = NsLimits {
        max_targets: (word & 0xffff) as u32,
        max_fanout: ((word >> 16) & 0xffff) as u16,
        max_minibatches: 4,
    };
    let node_count = word >> 32;
    if let Ok(c) = NsConfig::parse(rest, &limits, node_count) {
        let targets: Vec<u64> = c.targets().collect();
        assert!(targets.len() <= limits.max_targets as usize);
        assert!(targets.iter().all(|&t| t < node_count), "{targets:?}");
        assert!(c.fanouts().iter().all(|&f| f <= limits.max_fanout));
        assert!((1..=usize::from(limits.max_minibatches)).contains(&c.minibatch_count()));
        let mut joined = Vec::new();
        for i in 0..c.minibatch_count() {
            let m = c
                .minibatch(i)
                .expect("every index below the count names a minibatch");
            assert!(!m.targets.is_empty());
            assert_eq!(m.first_target as usize, joined.len());
            joined.extend(m.targets.iter().map(|t| t.get()));
        }
        assert_eq!(joined, targets);
        assert!(c.minibatch(c.minibatch_count()).is_none());
        assert!(c.targets_offset_bytes() + 8 * targets.len() <= rest.len());
    }
}

/// A subgraph (what NS_COLLECT returns): an accepted one's every layer has `dst_count + 1`
/// non-decreasing row pointers ending at its edge count, and every source index below its
/// `src_count`.
pub fn subgraph(data: &[u8]) {
    let Ok(v) = SubgraphView::parse(data) else {
        return;
    };
    assert!(v.as_bytes().len() <= data.len());
    for l in 0..v.layer_count() {
        let layer = v.layer(l);
        let c = layer.counts;
        assert_eq!(layer.indptr.len(), c.dst_count as usize + 1);
        assert_eq!(layer.indices.len(), c.edge_count as usize);
        assert!(layer.indptr.windows(2).all(|w| w[0].get() <= w[1].get()));
        assert_eq!(layer.indptr.last().map(|p| p.get()), Some(c.edge_count));
        assert!(layer.indices.iter().all(|i| i.get() < c.src_count));
    }
    let _ = v.nodes().len();
}

/// Sampled ids (what NS_COLLECT returns when the host builds the subgraph) and the host's build
/// of a subgraph from them. The first 8 bytes give the graph's node count (bits 0..16, plus 1)
/// and the number of targets (bits 16..24, plus 1), the targets being the nodes `0..count`
/// (modulo the node count); the rest is the device's result, whose every layer's fanout is the
/// largest. An accepted result's layers have `dst_count + 1` non-decreasing row pointers ending
/// at its edge count; a subgraph the host builds from them parses and keeps the ids' counts.
pub fn sampled_ids(data: &[u8]) {
    let (word, rest) = take_u64(data);
    let Ok(v) = SampledIdsView::parse(rest) else {
        return;
    };
    assert!(v.as_bytes().len() <= rest.len());
    for l in 0..v.layer_count() {
        let layer = v.layer(l);
        let c = layer.counts;
        assert_eq!(layer.indptr.len(), c.dst_count as usize + 1);
        assert_eq!(layer.ids.len(), c.edge_count as usize);
        assert!(layer.indptr.windows(2).all(|w| w[0].get() <= w[1].get()));
        assert_eq!(layer.indptr.last().map(|p| p.get()), Some(c.edge_count));
    }
    let node_count = (word & 0xFFFF) + 1;
    let targets: Vec<u64> = (0..(word >> 16 & 0xFF) + 1)
        .map(|t| t % node_count)
        .collect();
    let fanouts = vec![sagessd_abi::sample::MAX_FANOUT; v.layer_count()];
    let built = sagessd_runtime::sampler::host_build::HostBuilder::default().build(
        rest,
        node_count,
        v.seed(),
        &fanouts,
        &targets,
    );
    if let Ok(sub) = built {
        let view = SubgraphView::parse(sub.as_bytes()).expect("a built subgraph parses");
        for l in 0..v.layer_count() {
            assert_eq!(
                view.layer(l).counts.edge_count,
                v.layer(l).counts.edge_count
            );
            assert_eq!(view.layer(l).counts.dst_count, v.layer(l).counts.dst_count);
        }
    }
}

/// A GRAPH_ATTACH descriptor (with its optional FEAT extension) against a namespace whose LBA
/// size and length come from the first bytes: an accepted one's regions lie inside the
/// namespace.
pub fn graph_descriptor(data: &[u8]) {
    let (word, rest) = take_u64(data);
    let block_size = if word & 1 == 0 { 512 } else { 4096 };
    let namespace_blocks = word >> 1;
    if let Ok(d) = GraphDescriptor::parse(rest, block_size, namespace_blocks) {
        let ends = [
            d.indptr.slba.checked_add(d.indptr.block_count),
            d.indices.slba.checked_add(d.indices.block_count),
        ];
        assert!(
            ends.iter()
                .all(|e| e.is_some_and(|e| e <= namespace_blocks)),
            "{d:?} in {namespace_blocks} blocks"
        );
        let mut wire = [0u8; 128];
        let n = d.encode(&mut wire);
        assert_eq!(n, d.wire_len());
    }
}

/// A device image (`sagessd emulator serve --image`: the flash file) for the small test device,
/// then a boot from it. The input is the header's fields (their CRC32C is appended, so that the
/// opener gets past it) followed by what the file holds after its header: page states, spare
/// areas, page data (the file is padded with zeros to its length). The boot then recovers from
/// whatever flash that is; an accepted image is a device that answers.
pub fn device_image(data: &[u8]) {
    if let Ok(Ok(mut ssd)) = open_device_image(data) {
        assert!(ssd.block_size_bytes() > 0);
        assert!(ssd.settle().is_ok());
    }
}

/// The file [`device_image`] builds from its input, opened as the small device: `Err` if the
/// file could not be written, else what the opener said.
pub fn open_device_image(
    data: &[u8],
) -> std::io::Result<Result<sagessd_emulator::Ssd, sagessd_emulator::EmulatorError>> {
    use std::io::Write;
    thread_local! {
        static PATH: std::path::PathBuf = std::env::temp_dir()
            .join(format!("sagessd-fuzz-image-{}.img", std::process::id()));
    }
    let config = crate::small_config();
    let layout = sagessd_emulator::nand::FlashFileLayout::new(&config.nand.geometry());
    let fields = &data[..data.len().min(layout.header_fields_bytes)];
    let rest = data.get(layout.header_fields_bytes..).unwrap_or(&[]);
    let crc = sagessd_abi::crc32c::crc32c(fields);
    PATH.with(|path| {
        let mut file = std::fs::File::create(path)?;
        let mut header = [fields, &crc.to_le_bytes()[..]].concat();
        header.resize(layout.states_at as usize, 0);
        file.write_all(&header)?;
        file.write_all(rest)?;
        // The length the geometry needs, so that the opener reaches the states.
        file.set_len(layout.len_bytes.max(layout.states_at + rest.len() as u64))?;
        drop(file);
        Ok(sagessd_emulator::Ssd::open_image(&config, path))
    })
}

/// A SNAP edge list, as `dataset import snap` reads it: what the reader accepts is two node ids
/// below 2^63 per edge, no self loop, and no more edges than lines.
pub fn edge_list(data: &[u8]) {
    if let Ok(edges) = sagessd_runtime::dataset::snap::parse_edges(data, Path::new("fuzz.txt")) {
        let lines = data.split(|b| *b == b'\n').count();
        assert!(edges.len() <= lines);
        for (u, v) in edges {
            assert!(u != v && u <= i64::MAX as u64 && v <= i64::MAX as u64);
        }
    }
}

/// A dataset folder's `manifest.toml` (the arrays it names absent): the opener parses and
/// checks it, then looks for the arrays; it must refuse with an error, never panic, and accept
/// nothing, since no array exists.
pub fn dataset_manifest(data: &[u8]) {
    thread_local! {
        static DIR: std::path::PathBuf = {
            let d = std::env::temp_dir()
                .join(format!("sagessd-fuzz-manifest-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&d);
            d
        };
    }
    DIR.with(|dir| {
        if std::fs::write(dir.join("manifest.toml"), data).is_ok() {
            assert!(sagessd_runtime::dataset::Dataset::open(dir).is_err());
        }
    });
}

/// A hardware description (TOML): parsing validates, so an accepted one validates again.
pub fn hw_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(hw) = sagessd_emulator::HwConfig::from_toml_str(text) {
        assert!(hw.validate().is_ok());
    }
}

/// A `.npy` file's bytes: an accepted header's data starts inside the file.
pub fn npy(data: &[u8]) {
    if let Ok((h, body)) = sagessd_runtime::npy::parse_bytes(Path::new("fuzz.npy"), data) {
        assert!(h.data_offset as usize <= data.len());
        assert!(body.len() <= data.len());
    }
}

/// An AUTH_Send or AUTH_Receive payload (a DH-HMAC-CHAP message), the same bytes as a
/// `DHHC-1:` secret, and (from 256 bytes on) as a peer's ffdhe2048 public value: an accepted
/// message encodes back to one that parses the same and is no longer than its input; an
/// accepted secret prints back to itself; a shared secret is the prime's length.
pub fn auth_messages(data: &[u8]) {
    use sagessd_abi::auth::DhGroup;
    use sagessd_abi::auth::ffdhe::KeyPair;
    use sagessd_abi::auth::message::Message;
    use sagessd_abi::auth::secret::Secret;
    if let Ok(message) = Message::parse(data) {
        let encoded = message.encode();
        assert!(encoded.len() <= data.len(), "{message:?}");
        assert_eq!(Message::parse(&encoded), Ok(message));
    }
    if let Ok(secret) = std::str::from_utf8(data).map(Secret::parse)
        && let Ok(secret) = secret
    {
        assert_eq!(Secret::parse(&secret.to_string()), Ok(secret));
    }
    if let Some(peer) = data.get(..256) {
        static KEYS: std::sync::OnceLock<KeyPair> = std::sync::OnceLock::new();
        let keys = KEYS.get_or_init(|| {
            KeyPair::new(DhGroup::Ffdhe2048, &[0x5A; 32]).expect("a group with keys")
        });
        if let Ok(z) = keys.shared_secret(peer) {
            assert_eq!(z.len(), 256);
        }
    }
}

/// A byte stream from an NVMe/TCP peer, read PDU by PDU under framing chosen by the first
/// byte, until the stream ends or the reader refuses it: no PDU may claim more data than the
/// framing allows.
pub fn tcp_pdus(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let framing = Framing {
        header_digest: mode & 1 != 0,
        data_digest: mode & 2 != 0,
        max_data_bytes: 1 << (8 + (mode >> 4) % 10),
        data_alignment_bytes: 4 << ((mode >> 2) & 3),
    };
    let allowed: Vec<u8> = (0..=0xffu8).collect();
    let mut r = Cursor::new(stream);
    for _ in 0..64 {
        match read_pdu(&mut r, &framing, &allowed) {
            Ok(pdu) => {
                assert!(pdu.data.len() <= framing.max_data_bytes, "{:?}", pdu.layout);
                let _ = pdu.pdu_type();
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_short_inputs_are_refused_quietly() {
        for (_, target) in TARGETS {
            target(&[]);
            target(&[0xff; 3]);
            target(&[0; 64]);
        }
    }
}

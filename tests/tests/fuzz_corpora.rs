//! The fuzz targets in the test suite: every file of every corpus in `fuzz/corpus/<target>/`
//! replayed through its target's body (`sagessd_tests::fuzz`), and inputs the project's own
//! encoders make (a real NS_config, subgraph, GRAPH_ATTACH descriptor, hardware description,
//! `.npy` file and NVMe/TCP PDU stream) run through the same bodies, accepted where they should
//! be. `SAGESSD_WRITE_FUZZ_SEEDS=1` writes those encoder inputs into the corpora as their seeds.
//! The coverage-guided runs themselves are `cargo +nightly fuzz run <target>` in `fuzz/`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::nvme::SubmissionEntry;
use sagessd_abi::subgraph::SubgraphView;
use sagessd_abi::tcp::stream::write_pdu;
use sagessd_abi::tcp::{CapsuleCmd, CommonHeader, Framing};
use sagessd_runtime::rmat::{RmatParams, generate};
use sagessd_runtime::sampler::{ReferenceSampler, Sampler};
use sagessd_tests::fuzz::TARGETS;
use zerocopy::IntoBytes;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// A path of its own for each call (the tests run in parallel and each makes its inputs).
fn scratch(tag: &str) -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::SeqCst);
    std::env::temp_dir().join(format!("sagessd-fuzz-{tag}-{}-{call}", std::process::id()))
}

/// Inputs made by the project's own encoders, per target: the shapes real hosts, peers and
/// files produce, so that the fuzzer starts past every magic number.
fn encoder_inputs(target: &str) -> Vec<Vec<u8>> {
    let le = |limits_targets: u64, fanout: u64, nodes: u64| {
        (limits_targets | fanout << 16 | nodes << 32).to_le_bytes()
    };
    match target {
        "dataset_manifest" => {
            // The manifest a generated dataset carries.
            let dir = scratch("manifest");
            let params = sagessd_runtime::dataset::generate::GenerateParams {
                name: "fuzz".into(),
                scale: 4,
                edge_factor: 2,
                seed: 1,
                feature_dim: 2,
                feature_dtype: sagessd_runtime::npy::Dtype::F32,
                classes: 2,
            };
            sagessd_runtime::dataset::generate::generate(&dir, &params).expect("a dataset");
            let bytes = std::fs::read(dir.join("manifest.toml")).expect("its manifest");
            let _ = std::fs::remove_dir_all(&dir);
            vec![bytes]
        }
        "device_image" => {
            // A small device with blocks written, closed cleanly, then written again (so the
            // boot has pages to replay): the header's fields, then the states and spare areas.
            let path = scratch("img");
            let _ = std::fs::remove_file(&path);
            let config = sagessd_tests::small_config();
            let mut ssd = sagessd_emulator::Ssd::open_image(&config, &path).expect("a device");
            let block = ssd.block_size_bytes() as usize;
            for (cid, lba) in [(1u16, 0u64), (2, 64)] {
                ssd.submit(
                    1,
                    SubmissionEntry::read_write(true, cid, 1, lba, 4),
                    vec![0x5a; 4 * block],
                )
                .expect("a write");
                ssd.reap().expect("its completion");
                if cid == 1 {
                    ssd.close_image(&path).expect("a clean stop");
                }
            }
            drop(ssd);
            let bytes = std::fs::read(&path).expect("the image");
            let _ = std::fs::remove_file(&path);
            let layout = sagessd_emulator::nand::FlashFileLayout::new(&config.nand.geometry());
            let fields = &bytes[..layout.header_fields_bytes];
            let states_and_spares = &bytes[layout.states_at as usize..layout.data_at as usize];
            vec![[fields, states_and_spares].concat()]
        }
        "edge_list" => vec![
            b"# a SNAP edge list\n% another comment\n10 20\n20\t30\n30 10\n10 10\n\n7 9\n".to_vec(),
        ],
        "ns_config" => {
            let (_, payload) =
                sagessd_host_driver::ns::ns_submit(7, &[4, 2], &[1, 2, 3]).expect("an NS_config");
            let (_, hyperbatch) = sagessd_host_driver::ns::ns_submit_hyperbatch(
                &[4, 2],
                &[(7, vec![1, 2]), (8, vec![3]), (9, vec![2, 4])],
            )
            .expect("a hyperbatch NS_config");
            vec![
                [&le(1024, 64, 1000)[..], &payload].concat(),
                [&le(1024, 64, 1000)[..], &hyperbatch].concat(),
            ]
        }
        "sampled_ids" => {
            // What an emulated device returns for a two-layer minibatch, after the node count
            // and target count that make its request (targets 0, 1, 2 of a 64-node graph).
            let g = generate(&RmatParams::graph500(6, 4, 1)).expect("a graph");
            let mut device = sagessd_tests::open(&sagessd_tests::small_config());
            sagessd_runtime::load::load_graph(&mut device, &g, 0).expect("loaded");
            let ids = device
                .sample_many_sampled_ids(&[3, 2], &[(3, vec![0, 1, 2])], 1)
                .expect("sampled ids");
            let head = ((g.node_count() - 1) | 2 << 16).to_le_bytes();
            vec![[&head[..], &ids[0]].concat()]
        }
        "subgraph" => {
            let g = generate(&RmatParams::graph500(6, 4, 1)).expect("a graph");
            let sub = ReferenceSampler::new(&g)
                .sample(3, &[3, 2], &[1, 2, 5])
                .expect("a sample");
            vec![sub.as_bytes().to_vec()]
        }
        "graph_descriptor" => {
            let d = GraphDescriptor {
                node_count: 100,
                edge_count: 400,
                id_width_bytes: 4,
                indptr: LbaRange {
                    slba: 0,
                    block_count: 2,
                },
                indices: LbaRange {
                    slba: 2,
                    block_count: 4,
                },
                features: None,
            };
            let mut wire = [0u8; 128];
            let n = d.encode(&mut wire);
            // 512-byte LBAs (bit 0 clear), a namespace of 64 blocks.
            vec![[&(64u64 << 1).to_le_bytes()[..], &wire[..n]].concat()]
        }
        "hw_config" => ["cosmos-plus.toml", "newport.toml"]
            .iter()
            .map(|f| {
                std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../hw-configs")
                        .join(f),
                )
                .expect("a shipped hardware description")
            })
            .collect(),
        "npy" => {
            // The header a dataset writer puts before an int64 vector of 3.
            let dir = scratch("npy");
            let _ = std::fs::remove_dir_all(&dir);
            let g = sagessd_runtime::graph::CsrGraph::from_edges(2, &[(0, 1), (1, 0)])
                .expect("a graph");
            let w = sagessd_runtime::dataset::DatasetWriter::create(&dir).expect("a writer");
            w.graph(&g).expect("the graph's arrays");
            let bytes = std::fs::read(dir.join("indptr.npy")).expect("indptr.npy");
            let _ = std::fs::remove_dir_all(&dir);
            vec![bytes]
        }
        "tcp_pdus" => {
            let framing = Framing {
                header_digest: false,
                data_digest: false,
                max_data_bytes: 1 << 12,
                data_alignment_bytes: 4,
            };
            let cmd = CapsuleCmd {
                ch: CommonHeader {
                    pdu_type: sagessd_abi::tcp::pdu_type::CAPSULE_CMD,
                    hlen: 72,
                    ..CommonHeader::default()
                },
                sqe: SubmissionEntry::read_write(true, 1, 1, 0, 1),
            };
            let mut out = Vec::new();
            write_pdu(&mut out, &framing, &cmd, &[0x5a; 64]).expect("a capsule");
            // Mode byte 0: no digests, 256-byte data limit bits (`max_data_bytes` from bits 4..).
            vec![[&[0x40u8][..], &out].concat()]
        }
        "firmware_commands" => {
            // Field by field (see `sagessd_tests::fuzz::firmware_commands`): write 8 blocks at
            // 16, read them, Write Zeroes with Deallocate over 4 of them, read again, deallocate
            // 16 blocks at 32, Flush, a 4-node graph attached, an NS_SUBMIT on it and its
            // NS_COLLECT, a raw Read left in flight, then wait for it.
            let raw = SubmissionEntry::read_write(false, 5, 1, 0, 1);
            let mut seed = vec![0, 7, 16, 0, 0x33, 1, 7, 16, 0, 2, 3, 18, 0, 1, 1, 7, 16, 0];
            seed.extend([3, 15, 32, 0, 4]);
            seed.extend([5, 3, 2, 1, 2, 1, 0, 3, 0, 1, 3, 0, 10, 0, 0, 0]);
            seed.extend([6, 1, 0, 0, 1, 0, 1, 2, 2, 9, 0, 0, 0, 0, 0, 0, 0]);
            seed.extend([7, 0, 255, 0, 0, 0, 0, 0, 0]);
            seed.extend([8, 1]);
            seed.extend_from_slice(raw.as_bytes());
            seed.extend([0, 2, 10]);
            vec![seed]
        }
        "auth_messages" => {
            // The messages of a bidirectional ffdhe2048 transaction as Linux's host and the
            // target send them, a Failure1, and a secret as nvme-cli prints it.
            use sagessd_abi::auth::message::Message;
            let c = [0xC1; 32];
            let dh = [0x0D; 256];
            let messages = [
                Message::Negotiate {
                    t_id: 0,
                    sc_c: 0,
                    hash_ids: &[1, 2, 3],
                    dh_group_ids: &[0, 1, 2, 3, 4, 5],
                },
                Message::Challenge {
                    t_id: 0,
                    hash_id: 1,
                    dh_group_id: 1,
                    seqnum: 7,
                    challenge: &c,
                    dh_value: &dh,
                },
                Message::Reply {
                    t_id: 0,
                    response: &c,
                    ctrl_challenge: Some(&c),
                    seqnum: 9,
                    dh_value: &dh,
                },
                Message::Success1 {
                    t_id: 0,
                    hl: 32,
                    response: Some(&c),
                },
                Message::Success2 { t_id: 0 },
                Message::Failure {
                    from_controller: true,
                    t_id: 0,
                    reason: 1,
                    explanation: 1,
                },
            ];
            let mut inputs: Vec<Vec<u8>> = messages.iter().map(Message::encode).collect();
            inputs.push(b"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:".to_vec());
            inputs
        }
        "tcp_auth" => {
            // Field by field (see `sagessd_tests::fuzz::tcp_auth`). ffdhe2048 on: a Negotiate
            // (transaction 0, SHA-256, null or ffdhe2048), the Challenge received, the right
            // Reply, its Success1 received, then a Property Get the queue now serves. Then the
            // same with a wrong secret: Failure1.
            let mut right = vec![1];
            right.extend([0, 0, 0, 0, 1, 1, 2, 0, 1]);
            right.extend([4, 0]);
            right.extend([1, 0, 0, 0, 0, 0, 0, 0]);
            right.extend([4, 0]);
            right.push(5);
            let mut wrong = right.clone();
            wrong[13] = 0xFF; // the Reply's "right secret" byte
            vec![right, wrong]
        }
        "tcp_connection" => {
            // Field by field (see `sagessd_tests::fuzz::tcp_connection`). An admin connection:
            // no digests, its Connect, CC.EN set. Then, with a controller the harness set up
            // (mode bit 7), an I/O queue's Connect, a Read and a Write whose data moves by the
            // transport, and the Write's H2CData.
            let mut admin = vec![0];
            admin.extend([0, 0, 31, 0, 1, 0, 0, 0, 0, 0, 0]);
            admin.extend([2, 0, 2, 0, 0, 0]);
            let mut io = vec![0x80];
            io.extend([0, 1, 1, 31, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
            io.extend([2, 1, 0, 0, 0, 0, 4, 0, 64, 0]);
            io.extend([2, 1, 1, 0, 0, 0, 5, 0, 64, 0]);
            io.extend([3, 1, 5, 0, 0, 0, 0, 0, 0, 2, 0]);
            io.extend([0x5a; 512]);
            vec![admin, io]
        }
        _ => Vec::new(),
    }
}

#[test]
fn every_corpus_replays_without_a_panic() {
    let write = std::env::var_os("SAGESSD_WRITE_FUZZ_SEEDS").is_some();
    for (name, target) in TARGETS {
        let dir = corpus_dir(name);
        if write {
            std::fs::create_dir_all(&dir).expect("the corpus folder");
            for (i, input) in encoder_inputs(name).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-encoder-{i}")), input).expect("a seed");
            }
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (each target has a corpus)", dir.display()))
            .map(|e| e.expect("a corpus entry").path())
            .collect();
        assert!(!files.is_empty(), "{}: an empty corpus", dir.display());
        let mut replayed = 0;
        for f in &files {
            let bytes = match std::fs::read(f) {
                Ok(bytes) => bytes,
                // A fuzzer running on the corpus meanwhile replaces files as it minimises.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("{}: {e}", f.display()),
            };
            target(&bytes);
            replayed += 1;
        }
        assert!(replayed > 0, "{}: no input replayed", dir.display());
        eprintln!("fuzz corpus {name}: {replayed} inputs replayed");
    }
}

#[test]
fn the_encoders_inputs_are_accepted() {
    // What the project itself sends or writes must get past each parser, or the fuzzer's
    // seeds would start at a refusal.
    let limits = sagessd_abi::ns_config::NsLimits {
        max_targets: 1024,
        max_fanout: 64,
        max_minibatches: 4,
    };
    for ns in &encoder_inputs("ns_config") {
        assert!(sagessd_abi::ns_config::NsConfig::parse(&ns[8..], &limits, 1000).is_ok());
    }
    assert!(SubgraphView::parse(&encoder_inputs("subgraph")[0]).is_ok());
    // The sampled-ids seed builds on the host into the reference's subgraph.
    let ids = &encoder_inputs("sampled_ids")[0];
    let g = generate(&RmatParams::graph500(6, 4, 1)).expect("a graph");
    let want = ReferenceSampler::new(&g)
        .sample(3, &[3, 2], &[0, 1, 2])
        .expect("a sample");
    let built = sagessd_runtime::sampler::host_build::HostBuilder::default()
        .build(&ids[8..], g.node_count(), 3, &[3, 2], &[0, 1, 2])
        .expect("the seed builds");
    assert!(built == want, "the seed's host build is the reference");
    let edges = &encoder_inputs("edge_list")[0];
    let parsed = sagessd_runtime::dataset::snap::parse_edges(&edges[..], Path::new("x.txt"));
    assert_eq!(parsed.expect("the edge-list seed parses").len(), 4);
    let d = &encoder_inputs("graph_descriptor")[0];
    assert!(GraphDescriptor::parse(&d[8..], 512, 64).is_ok());
    for toml in encoder_inputs("hw_config") {
        let text = std::str::from_utf8(&toml).expect("UTF-8");
        assert!(sagessd_emulator::HwConfig::from_toml_str(text).is_ok());
    }
    let image = sagessd_tests::fuzz::open_device_image(&encoder_inputs("device_image")[0]);
    assert!(matches!(image, Ok(Ok(_))), "the device-image seed boots");
    let npy = &encoder_inputs("npy")[0];
    assert!(sagessd_runtime::npy::parse_bytes(Path::new("x.npy"), npy).is_ok());
    let tcp = &encoder_inputs("tcp_pdus")[0];
    let framing = Framing {
        header_digest: false,
        data_digest: false,
        max_data_bytes: 1 << 12,
        data_alignment_bytes: 4,
    };
    let pdu = sagessd_abi::tcp::stream::read_pdu(
        &mut std::io::Cursor::new(&tcp[1..]),
        &framing,
        &[sagessd_abi::tcp::pdu_type::CAPSULE_CMD],
    )
    .expect("the capsule reads back");
    assert_eq!(pdu.data, vec![0x5a; 64]);
    // The structured seeds get where their comments say.
    let reached =
        sagessd_tests::fuzz::firmware_commands::run(&encoder_inputs("firmware_commands")[0]);
    let want = sagessd_tests::fuzz::firmware_commands::Reached {
        reads_checked: 2,
        graphs_attached: 1,
        jobs_submitted: 1,
        jobs_collected: 1,
        raw_commands: 1,
    };
    assert_eq!(reached, want);
    let tcp_seeds = encoder_inputs("tcp_connection");
    // Admin: Connect and the property write; I/O queue: Connect, Read and Write.
    assert_eq!(sagessd_tests::fuzz::tcp_connection::run(&tcp_seeds[0]), 2);
    assert_eq!(sagessd_tests::fuzz::tcp_connection::run(&tcp_seeds[1]), 3);
    let auth_seeds = encoder_inputs("tcp_auth");
    let reached = sagessd_tests::fuzz::tcp_auth::run(&auth_seeds[0]);
    let want = sagessd_tests::fuzz::tcp_auth::Reached {
        challenges: 1,
        successes: 1,
        failures: 0,
        served: 1,
    };
    assert_eq!(reached, want);
    let reached = sagessd_tests::fuzz::tcp_auth::run(&auth_seeds[1]);
    assert_eq!((reached.successes, reached.failures), (0, 1), "{reached:?}");
    for message in &encoder_inputs("auth_messages")[..6] {
        assert!(sagessd_abi::auth::message::Message::parse(message).is_ok());
    }
    // And a wrong one is refused: the check can fail.
    let mut bad = encoder_inputs("ns_config")[0][8..].to_vec();
    bad[0] ^= 0xff;
    assert!(sagessd_abi::ns_config::NsConfig::parse(&bad, &limits, 1000).is_err());
}

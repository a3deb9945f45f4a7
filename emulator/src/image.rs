//! Device images: an emulated SSD's persistent state in one file, so that data written once
//! survives emulator restarts (`sagessd emulator serve --image PATH`).
//!
//! The image holds what a real SSD keeps across a power cycle: the NAND array, each block's
//! program pointer and every programmed page with its spare area. Nothing else: the firmware
//! keeps its mapping, block tables, counters and the attached graph on the flash itself
//! (checkpoints plus each page's out-of-band record) and boots from it with
//! [`Firmware::recover`], exactly as a board does. Saving first asks for a checkpoint, so the
//! next boot has nothing to replay. Controller DRAM (the page buffer, sampling jobs) is volatile
//! and not kept.
//!
//! Format, little-endian: magic `SGSSDIMG`, version, the geometry and namespace format it
//! belongs to, the program pointers, the page count and each page (number, data and spare),
//! then a CRC32C of everything before it. A file that does not match its configuration or its
//! checksum is refused with an error naming the file and the field.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use sagessd_abi::crc32c::{crc32c, crc32c_update};
use sagessd_firmware::hal::Flash;
use sagessd_firmware::{Firmware, RestoreError};

use crate::nand::NandArray;

use crate::config::HwConfig;
use crate::error::EmulatorError;
use crate::ssd::Ssd;

/// Magic of a device image.
const MAGIC: [u8; 8] = *b"SGSSDIMG";
/// Version of the image format.
const VERSION: u32 = 2;

impl Ssd {
    /// The device saved in `path`, or a freshly formatted one if `path` does not exist yet.
    pub fn open_image(config: &HwConfig, path: &Path) -> Result<Self, EmulatorError> {
        if !path.exists() {
            return Self::new(config);
        }
        let bytes = fs::read(path).map_err(|source| EmulatorError::ImageIo {
            path: path.to_owned(),
            source,
        })?;
        Self::from_image_bytes(config, &bytes, path)
    }

    /// The device an image's `bytes` hold (read from `path`, which errors name): every field
    /// is checked against `config` and the checksum before anything is restored.
    pub fn from_image_bytes(
        config: &HwConfig,
        bytes: &[u8],
        path: &Path,
    ) -> Result<Self, EmulatorError> {
        let bad = |field: &str, reason: String| EmulatorError::Image {
            path: path.to_owned(),
            field: field.to_owned(),
            reason,
        };
        let (body, tail) = bytes
            .split_at_checked(bytes.len().saturating_sub(4))
            .ok_or_else(|| bad("checksum", "file too short".into()))?;
        let stored = u32::from_le_bytes(tail.try_into().unwrap_or([0; 4]));
        if bytes.len() < 12 || crc32c(body) != stored {
            return Err(bad(
                "checksum",
                "the file is damaged or not a device image".into(),
            ));
        }
        let mut r = Cursor { bytes: body, path };
        if r.take(8, "magic")? != MAGIC {
            return Err(bad("magic", "not a sagessd device image".into()));
        }
        let version = r.u32("version")?;
        if version != VERSION {
            return Err(bad(
                "version",
                format!("{version}, this build reads {VERSION}"),
            ));
        }
        let g = config.nand.geometry();
        for (field, want) in [
            ("nand.channels", g.channels),
            ("nand.ways", g.ways),
            ("nand.dies_per_way", g.dies_per_way),
            ("nand.blocks_per_die", g.blocks_per_die),
            ("nand.pages_per_block", g.pages_per_block),
            ("nand.page_size_bytes", g.page_size_bytes),
            (
                "firmware.block_size_bytes",
                config.firmware.block_size_bytes,
            ),
            (
                "firmware.over_provisioning_percent",
                u32::from(config.firmware.over_provisioning_percent),
            ),
        ] {
            let got = r.u32(field)?;
            if got != want {
                return Err(bad(
                    field,
                    format!("the image has {got}, the config {want}"),
                ));
            }
        }
        let blocks = r.u32("block count")? as usize;
        if blocks != g.block_count() as usize {
            return Err(bad("block count", format!("{blocks}")));
        }
        let next_page = (0..blocks)
            .map(|_| r.u32("next_page"))
            .collect::<Result<Vec<_>, _>>()?;
        let page_count = r.u64("page count")?;
        if page_count > g.page_count() {
            return Err(bad("page count", format!("{page_count}")));
        }
        let page_bytes = g.window_bytes();
        // The count must fit the bytes that follow before anything is allocated for it.
        if page_count.saturating_mul(4 + page_bytes as u64) > r.bytes.len() as u64 {
            return Err(bad(
                "page count",
                format!("{page_count}: more than the file holds"),
            ));
        }
        let mut pages = Vec::with_capacity(page_count as usize);
        for _ in 0..page_count {
            let ppn = r.u32("page number")?;
            pages.push((ppn, r.take(page_bytes, "page contents")?.into()));
        }
        if !r.bytes.is_empty() {
            return Err(bad("length", "bytes after the last page".into()));
        }
        let (mut nand, dram) = Self::parts(config)?;
        nand.load_contents(next_page, pages)
            .map_err(|field| bad(field, "out of range for the geometry".into()))?;
        let (firmware, _) = Firmware::recover(
            config.firmware.to_firmware_config(),
            nand,
            dram,
            &mut NandArray::wait_for_completion,
        )
        .map_err(|e| match e {
            RestoreError::Config(c) => config.firmware_error(c),
            RestoreError::Invalid(f) => bad(f, "does not match this configuration".into()),
            RestoreError::Flash(e) => bad("nand", format!("the array refused a boot read: {e:?}")),
        })?;
        Ok(Self::around(config, firmware))
    }

    /// Saves the device to `path` (through a temporary file renamed over it, so a crash leaves
    /// the previous image). Every command must have been reaped; background work is finished
    /// first.
    pub fn save_image(&mut self, path: &Path) -> Result<(), EmulatorError> {
        self.settle()?;
        self.checkpoint()?;
        let io = |source| EmulatorError::ImageIo {
            path: path.to_owned(),
            source,
        };
        let tmp = path.with_extension("tmp");
        let file = fs::File::create(&tmp).map_err(io)?;
        let mut w = Summed {
            inner: BufWriter::with_capacity(1 << 20, file),
            crc: !0,
        };
        let nand = self.firmware().flash();
        let g = nand.geometry();
        let fw_config = *self.firmware().config();
        w.put(&MAGIC).map_err(io)?;
        for v in [
            VERSION,
            g.channels,
            g.ways,
            g.dies_per_way,
            g.blocks_per_die,
            g.pages_per_block,
            g.page_size_bytes,
            fw_config.block_size_bytes(),
            u32::from(fw_config.over_provisioning_percent),
            g.block_count(),
        ] {
            w.put(&v.to_le_bytes()).map_err(io)?;
        }
        for p in nand.next_pages() {
            w.put(&p.to_le_bytes()).map_err(io)?;
        }
        let pages = nand.programmed_pages();
        w.put(&(pages.len() as u64).to_le_bytes()).map_err(io)?;
        for (ppn, data) in pages {
            w.put(&ppn.to_le_bytes()).map_err(io)?;
            w.put(data).map_err(io)?;
        }
        let crc = !w.crc;
        let mut inner = w.inner;
        inner.write_all(&crc.to_le_bytes()).map_err(io)?;
        let file = inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)
    }
}

/// A writer that keeps a running CRC32C of what it wrote.
struct Summed<W> {
    inner: W,
    crc: u32,
}

impl<W: Write> Summed<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc = crc32c_update(self.crc, bytes);
        self.inner.write_all(bytes)
    }
}

/// Reads little-endian fields off an image, naming the field a short file lacks.
struct Cursor<'a> {
    bytes: &'a [u8],
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], EmulatorError> {
        if self.bytes.len() < n {
            return Err(EmulatorError::Image {
                path: self.path.to_owned(),
                field: field.to_owned(),
                reason: "the file ends before it".into(),
            });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, field: &str) -> Result<u32, EmulatorError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, field: &str) -> Result<u64, EmulatorError> {
        Ok(u64::from(self.u32(field)?) | (u64::from(self.u32(field)?) << 32))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use sagessd_abi::nvme::{Status, SubmissionEntry};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("sagessd-image-{}-{name}.img", std::process::id()))
    }

    fn write(ssd: &mut Ssd, cid: u16, lba: u64, data: Vec<u8>) {
        let blocks = (data.len() / ssd.block_size_bytes() as usize) as u32;
        let sqe = SubmissionEntry::read_write(true, cid, 1, lba, blocks);
        assert_eq!(
            ssd.execute(1, sqe, data).unwrap().cqe.status(),
            Status::SUCCESS
        );
    }

    fn read(ssd: &mut Ssd, cid: u16, lba: u64, bytes: usize) -> Vec<u8> {
        let blocks = (bytes / ssd.block_size_bytes() as usize) as u32;
        let sqe = SubmissionEntry::read_write(false, cid, 1, lba, blocks);
        let done = ssd.execute(1, sqe, vec![0; bytes]).unwrap();
        assert_eq!(done.cqe.status(), Status::SUCCESS);
        done.data
    }

    #[test]
    fn data_survives_a_save_and_reopen_and_bad_images_are_named() {
        let config = HwConfig::cosmos_plus();
        let path = scratch("roundtrip");
        let mut ssd = Ssd::open_image(&config, &path).expect("a missing image is a fresh device");
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 13 % 251) as u8).collect();
        write(&mut ssd, 1, 100, data.clone());
        write(&mut ssd, 2, 100_000, vec![0xA5; 4096]);
        ssd.save_image(&path).expect("saves");

        let mut back = Ssd::open_image(&config, &path).expect("reopens");
        assert_eq!(read(&mut back, 3, 100, data.len()), data);
        assert_eq!(read(&mut back, 4, 100_000, 4096), vec![0xA5; 4096]);
        assert_eq!(
            read(&mut back, 5, 5000, 4096),
            vec![0; 4096],
            "never written"
        );
        // Writes after the restart go on from the restored FTL state.
        write(&mut back, 6, 100, vec![0x11; 4096]);
        back.save_image(&path).expect("saves again");
        let mut again = Ssd::open_image(&config, &path).expect("reopens again");
        assert_eq!(read(&mut again, 7, 100, 4096), vec![0x11; 4096]);
        assert_eq!(read(&mut again, 8, 101, 4096), data[4096..8192].to_vec());

        let bytes = fs::read(&path).unwrap();
        let err = |bytes: &[u8], config: &HwConfig| {
            fs::write(&path, bytes).unwrap();
            Ssd::open_image(config, &path).unwrap_err().to_string()
        };
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert!(err(&flipped, &config).contains("checksum"));
        assert!(err(&bytes[..bytes.len() / 2], &config).contains("checksum"));
        let mut other = config.clone();
        other.nand.pages_per_block /= 2;
        let message = err(&bytes, &other);
        assert!(message.contains("nand.pages_per_block") && message.contains(".img"));
        let _ = fs::remove_file(&path);
    }
}

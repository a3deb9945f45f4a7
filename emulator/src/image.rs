//! Device images: an emulated SSD whose flash is a file, so that what it was written survives
//! the emulator — a clean stop, a `kill -9`, a crash (`sagessd emulator serve --image PATH`).
//!
//! The image *is* the NAND array: every page program and block erase is written through to the
//! file as the array performs it (`nand::store`), pages with their spare areas. Nothing else is
//! kept: the firmware holds its mapping, block tables, counters and the attached graph on the
//! flash itself (checkpoints plus each page's out-of-band record), and a start boots from the
//! file with [`Firmware::recover`], exactly as a board boots from its NAND after a power cut.
//! A clean stop only adds a checkpoint (so the next boot has nothing to replay) and an `fsync`.
//! Controller DRAM (the page buffer, sampling jobs) is volatile and not kept.
//!
//! The device reports no volatile write cache: a write completes once its pages are programmed,
//! and so written to the file. A killed emulator process loses nothing that completed; a host
//! power loss could lose what the host OS had not written back (the file is synced at a clean
//! stop, not at every write).

use std::path::Path;

use sagessd_firmware::{BootReport, Firmware, RestoreError};

use crate::config::HwConfig;
use crate::error::EmulatorError;
use crate::nand::{ImageFormat, NandArray};
use crate::ssd::Ssd;

impl Ssd {
    /// The device whose flash is the file at `path`, booted from what it holds; a file that
    /// does not exist yet is created erased (its folder must exist: the error comes now, not at
    /// the first write). A file of another geometry or namespace format is refused, naming the
    /// file and the field.
    pub fn open_image(config: &HwConfig, path: &Path) -> Result<Self, EmulatorError> {
        let bad = |field: &str, reason: String| EmulatorError::Image {
            path: path.to_owned(),
            field: field.to_owned(),
            reason,
        };
        let (nand, dram) = Self::parts(config)?;
        let format = ImageFormat {
            block_size_bytes: config.firmware.block_size_bytes,
            over_provisioning_percent: u32::from(config.firmware.over_provisioning_percent),
        };
        let nand = nand.with_file(path, format)?;
        let (firmware, _) = Self::recover(config, nand, dram, &|field, reason| {
            bad(field.unwrap_or("nand"), reason)
        })?;
        Ok(Self::around(config, firmware))
    }

    /// Boots the firmware of `config` from what `nand` holds ([`Firmware::recover`]); a boot
    /// that refuses the flash becomes `bad(field, reason)` (the checkpoint field at fault, or
    /// `None` when the array refused a read).
    pub(crate) fn recover(
        config: &HwConfig,
        nand: NandArray,
        dram: Vec<u8>,
        bad: &dyn Fn(Option<&str>, String) -> EmulatorError,
    ) -> Result<(Firmware<NandArray, Vec<u8>>, BootReport), EmulatorError> {
        Firmware::recover(
            config.firmware_config(),
            nand,
            dram,
            &mut NandArray::wait_for_completion,
        )
        .map_err(|e| match e {
            RestoreError::Config(c) => config.firmware_error(c),
            RestoreError::Invalid(f) => bad(Some(f), "does not match this configuration".into()),
            RestoreError::Flash(e) => bad(None, format!("the array refused a boot read: {e:?}")),
        })
    }

    /// A clean stop of a device opened with [`Self::open_image`]: every command must have been
    /// reaped; background work finishes, a checkpoint is written (the next boot replays
    /// nothing) and the file is synced. `path` is named by errors.
    pub fn close_image(&mut self, path: &Path) -> Result<(), EmulatorError> {
        self.checkpoint()?;
        self.firmware()
            .flash()
            .sync()
            .map_err(|source| EmulatorError::ImageIo {
                path: path.to_owned(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
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
    fn data_survives_a_clean_stop_and_an_abandoned_process_and_bad_images_are_named() {
        let config = HwConfig::cosmos_plus();
        let path = scratch("roundtrip");
        let _ = fs::remove_file(&path);
        let mut ssd = Ssd::open_image(&config, &path).expect("a missing image is a fresh device");
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 13 % 251) as u8).collect();
        write(&mut ssd, 1, 100, data.clone());
        write(&mut ssd, 2, 100_000, vec![0xA5; 4096]);
        ssd.close_image(&path).expect("closes");
        drop(ssd);

        let mut back = Ssd::open_image(&config, &path).expect("reopens");
        assert_eq!(read(&mut back, 3, 100, data.len()), data);
        assert_eq!(read(&mut back, 4, 100_000, 4096), vec![0xA5; 4096]);
        assert_eq!(
            read(&mut back, 5, 5000, 4096),
            vec![0; 4096],
            "never written"
        );
        // Writes after the restart, then the device dropped without a clean stop (what a
        // SIGKILL leaves): the completed write is in the file, and the boot replays it.
        write(&mut back, 6, 100, vec![0x11; 4096]);
        drop(back);
        let mut again = Ssd::open_image(&config, &path).expect("reopens after no clean stop");
        assert_eq!(read(&mut again, 7, 100, 4096), vec![0x11; 4096]);
        assert_eq!(read(&mut again, 8, 101, 4096), data[4096..8192].to_vec());
        drop(again);

        let mut other = config.clone();
        other.nand.pages_per_block /= 2;
        let message = Ssd::open_image(&other, &path).unwrap_err().to_string();
        assert!(
            message.contains("nand.pages_per_block") && message.contains(".img"),
            "{message}"
        );
        let mut flipped = vec![0u8; 4096];
        std::io::Read::read_exact(&mut fs::File::open(&path).unwrap(), &mut flipped).unwrap();
        flipped[20] ^= 1;
        let damaged = scratch("damaged");
        fs::write(&damaged, &flipped).unwrap();
        let message = Ssd::open_image(&config, &damaged).unwrap_err().to_string();
        assert!(message.contains("header checksum"), "{message}");
        let _ = fs::remove_file(&damaged);
        let _ = fs::remove_file(&path);

        let missing = std::env::temp_dir()
            .join("sagessd-no-such-folder")
            .join("x.img");
        let message = Ssd::open_image(&config, &missing).unwrap_err().to_string();
        assert!(message.contains("sagessd-no-such-folder"), "{message}");
    }
}

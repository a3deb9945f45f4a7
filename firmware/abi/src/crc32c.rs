//! CRC32C (Castagnoli): the NVMe/TCP header and data digest, and the integrity check of
//! sagessd device images.

/// CRC32C (Castagnoli, reflected, initial value and final XOR all ones): the NVMe/TCP digest.
pub fn crc32c(bytes: &[u8]) -> u32 {
    !crc32c_update(!0, bytes)
}

/// Continues a CRC32C over more bytes; `state` starts at `!0` and the digest is `!state`.
pub fn crc32c_update(mut state: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        state = CRC32C_TABLE[((state ^ u32::from(*b)) & 0xFF) as usize] ^ (state >> 8);
    }
    state
}

/// Byte-at-a-time table of the reflected polynomial 0x82F63B78.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        let split = crc32c_update(crc32c_update(!0, b"1234"), b"56789");
        assert_eq!(!split, 0xE306_9283);
    }
}

//! CRC32C (Castagnoli): the NVMe/TCP header and data digest, and the integrity check of
//! sagessd device images.

/// CRC32C (Castagnoli, reflected, initial value and final XOR all ones): the NVMe/TCP digest.
pub fn crc32c(bytes: &[u8]) -> u32 {
    !crc32c_update(!0, bytes)
}

/// Continues a CRC32C over more bytes; `state` starts at `!0` and the digest is `!state`.
/// Eight bytes a step (slicing-by-8: eight table lookups fold a 64-bit word), then a byte at a
/// time for the tail; every spare area read is checked with it, so it is on the flash read path.
pub fn crc32c_update(mut state: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ state;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        let t = |k: usize, x: u32, shift: u32| CRC32C_TABLES[k][((x >> shift) & 0xFF) as usize];
        state = t(7, lo, 0)
            ^ t(6, lo, 8)
            ^ t(5, lo, 16)
            ^ t(4, lo, 24)
            ^ t(3, hi, 0)
            ^ t(2, hi, 8)
            ^ t(1, hi, 16)
            ^ t(0, hi, 24);
    }
    for b in words.remainder() {
        state = CRC32C_TABLES[0][((state ^ u32::from(*b)) & 0xFF) as usize] ^ (state >> 8);
    }
    state
}

/// Slicing-by-8 tables of the reflected polynomial 0x82F63B78: table 0 advances the CRC by one
/// byte, table k by a byte followed by k zero bytes (8 KiB in all).
const CRC32C_TABLES: [[u32; 256]; 8] = {
    let mut tables = [[0u32; 256]; 8];
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
        tables[0][i] = c;
        i += 1;
    }
    let mut t = 1;
    while t < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = tables[t - 1][i];
            tables[t][i] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            i += 1;
        }
        t += 1;
    }
    tables
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

    /// The CRC a bit at a time, straight from the polynomial: no table, the oracle.
    fn bitwise(bytes: &[u8]) -> u32 {
        let mut state = !0u32;
        for b in bytes {
            state ^= u32::from(*b);
            for _ in 0..8 {
                state = if state & 1 != 0 {
                    (state >> 1) ^ 0x82F6_3B78
                } else {
                    state >> 1
                };
            }
        }
        !state
    }

    #[test]
    fn eight_bytes_a_step_equals_a_bit_at_a_time_at_every_length_and_alignment() {
        let data: [u8; 300] =
            core::array::from_fn(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8);
        for start in 0..8 {
            for len in 0..(data.len() - start) {
                let bytes = &data[start..start + len];
                assert_eq!(crc32c(bytes), bitwise(bytes), "start {start}, len {len}");
            }
        }
        // A flipped bit anywhere is seen (the oracle is not trivially equal).
        let mut flipped = data;
        flipped[137] ^= 0x10;
        assert_ne!(crc32c(&flipped), bitwise(&data));
    }
}

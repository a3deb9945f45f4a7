//! The fuzz input as a stream of fields: structured targets read their commands from it field
//! by field, so that libFuzzer's mutations change one field at a time and the target's inputs
//! get past magic numbers and length fields the harness fills in itself.

/// Fields read from the front of a fuzz input; past its end every field reads as zero.
pub struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    /// The input `data`, read from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next `n` bytes, fewer if the input ends first.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    /// A little-endian integer of `N` bytes (missing bytes are zero).
    fn le<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        let head = self.bytes(N);
        b[..head.len()].copy_from_slice(head);
        b
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        self.le::<1>()[0]
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.le())
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.le())
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.le())
    }

    /// The next byte as a flag (its low bit).
    pub fn flag(&mut self) -> bool {
        self.u8() & 1 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_little_endian_and_zero_past_the_end() {
        let mut i = Input::new(&[1, 2, 3, 4, 5]);
        assert_eq!(i.u16(), 0x0201);
        assert_eq!(i.u32(), 0x0005_0403);
        assert!(i.is_empty());
        assert_eq!((i.u64(), i.u8(), i.bytes(3)), (0, 0, &[][..]));
    }
}

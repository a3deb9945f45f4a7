//! The checks every section's validation is made of: each names the offending field and the
//! value given, e.g. `invalid hw config field nand.page_size_bytes: must be a multiple of 512
//! (got 1000)`.

use crate::error::EmulatorError;

/// Longest fixed latency any time field may hold (10 s): larger values are unit mistakes.
pub(super) const MAX_LATENCY_NS: u64 = 10_000_000_000;
/// Largest per-unit cycle cost accepted (10^9 cycles): larger values are unit mistakes.
pub(super) const MAX_CYCLES: u64 = 1_000_000_000;

/// The error naming `field`, with why it is wrong.
pub(super) fn invalid(field: &'static str, reason: impl Into<String>) -> EmulatorError {
    EmulatorError::InvalidConfig {
        field,
        reason: reason.into(),
    }
}

/// `Ok` if `ok`, else the error naming `field` with `reason`.
pub(super) fn check(
    ok: bool,
    field: &'static str,
    reason: impl FnOnce() -> String,
) -> Result<(), EmulatorError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, reason()))
    }
}

/// `value` > 0.
pub(super) fn non_zero(value: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value > 0, field, || {
        "must be greater than 0 (got 0)".to_string()
    })
}

/// `min` ≤ `value` ≤ `max`.
pub(super) fn in_range(
    value: u64,
    min: u64,
    max: u64,
    field: &'static str,
) -> Result<(), EmulatorError> {
    check((min..=max).contains(&value), field, || {
        format!("must be between {min} and {max} (got {value})")
    })
}

/// `value` ≤ `max`.
pub(super) fn at_most(value: u64, max: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value <= max, field, || {
        format!("must be at most {max} (got {value})")
    })
}

/// `value` is a power of two.
pub(super) fn power_of_two(value: u64, field: &'static str) -> Result<(), EmulatorError> {
    check(value.is_power_of_two(), field, || {
        format!("must be a power of two (got {value})")
    })
}

//! Reading a JS bigint as a `u64` without allocating: napi-rs's `BigInt` copies the words
//! into a `Vec` on every call, which costs more than the arena operation itself.
#![allow(unsafe_code)]

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValidateNapiValue};
use napi::{sys, ValueType};

/// A JS bigint, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum U64Arg {
    /// 0 … 2^64−1.
    Value(u64),
    /// Below zero.
    Negative(OutOfRange),
    /// 2^64 or more.
    TooLarge(OutOfRange),
}

/// A bigint outside `0 … 2^64−1`, kept for messages: they quote the value given (`-1`), not
/// the address or size it could not be (`0x0`, 2^64−1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange {
    /// Its low 128 bits of magnitude.
    magnitude: u128,
    /// Below zero.
    negative: bool,
    /// Wider than 128 bits (`magnitude` is then its low bits only).
    wide: bool,
}

impl OutOfRange {
    fn write(&self, f: &mut std::fmt::Formatter<'_>, hex: bool) -> std::fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        match (self.wide, hex) {
            (true, _) if self.negative => f.write_str("-2^128 or less"),
            (true, _) => f.write_str("2^128 or more"),
            (false, true) => write!(f, "{sign}{:#x}", self.magnitude),
            (false, false) => write!(f, "{sign}{}", self.magnitude),
        }
    }
}

/// Decimal, as a size is quoted.
impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write(f, false)
    }
}

/// `0x` and hex digits whatever the flags, as an address is quoted.
impl std::fmt::LowerHex for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write(f, true)
    }
}

impl TypeName for U64Arg {
    fn type_name() -> &'static str {
        "bigint"
    }

    fn value_type() -> ValueType {
        ValueType::BigInt
    }
}

impl ValidateNapiValue for U64Arg {}

impl FromNapiValue for U64Arg {
    unsafe fn from_napi_value(env: sys::napi_env, napi_val: sys::napi_value) -> napi::Result<Self> {
        let mut value = 0u64;
        let mut lossless = false;
        // SAFETY: `env` and `napi_val` are valid for this call (the trait's contract); the
        // out-parameters are live locals.
        let status =
            unsafe { sys::napi_get_value_bigint_uint64(env, napi_val, &mut value, &mut lossless) };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::new(
                napi::Status::BigintExpected,
                "expected a bigint",
            ));
        }
        if lossless {
            return Ok(U64Arg::Value(value));
        }
        let mut sign_bit = 0i32;
        let mut words = [0u64; 2];
        let mut word_count = words.len();
        // SAFETY: as above; `words` has room for `word_count` words, and napi writes at most
        // that many (it reports the full count in `word_count` when there are more).
        let status = unsafe {
            sys::napi_get_value_bigint_words(
                env,
                napi_val,
                &mut sign_bit,
                &mut word_count,
                words.as_mut_ptr(),
            )
        };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::new(
                napi::Status::BigintExpected,
                "expected a bigint",
            ));
        }
        let value = OutOfRange {
            magnitude: u128::from(words[0]) | (u128::from(words[1]) << 64),
            negative: sign_bit != 0,
            wide: word_count > words.len(),
        };
        Ok(if value.negative {
            U64Arg::Negative(value)
        } else {
            U64Arg::TooLarge(value)
        })
    }
}

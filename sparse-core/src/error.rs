//! The one error type of `sparse-core` and of every crate built on it.

use std::fmt;

/// Every fallible operation in the workspace returns this error.
///
/// Variants carry structured fields so that callers can react to the cause
/// rather than parse a message. New variants may be added, hence
/// `#[non_exhaustive]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A dimension does not fit the `u32` index space.
    #[error("dimension {dim} exceeds the u32 index space (max {max})")]
    DimensionTooLarge {
        /// The requested dimension.
        dim: u64,
        /// The largest dimension allowed.
        max: u64,
    },
    /// An index is not below the dimension.
    #[error("index {index} at position {position} is out of range for dimension {dim}")]
    IndexOutOfRange {
        /// The offending index.
        index: u64,
        /// Its position in the index list.
        position: usize,
        /// The dimension of the vector.
        dim: u64,
    },
    /// Indices are not strictly increasing (unsorted or duplicated).
    #[error("indices not strictly increasing at position {position}: {prev} then {next}")]
    NotStrictlyIncreasing {
        /// Position of the second index of the bad pair.
        position: usize,
        /// The earlier index.
        prev: u32,
        /// The later index, which is not larger.
        next: u32,
    },
    /// Two lengths that must agree do not.
    #[error("length mismatch in {what}: expected {expected}, got {got}")]
    LengthMismatch {
        /// What was being compared.
        what: &'static str,
        /// The expected length.
        expected: usize,
        /// The length found.
        got: usize,
    },
    /// Two vectors that are combined have different dimensions.
    #[error("dimension mismatch: {left} vs {right}")]
    DimensionMismatch {
        /// Dimension of the left operand.
        left: u64,
        /// Dimension of the right operand.
        right: u64,
    },
    /// `k` exceeds the number of elements it selects from.
    #[error("k = {k} is out of range for {len} elements")]
    KOutOfRange {
        /// The requested count.
        k: usize,
        /// The number of elements available.
        len: usize,
    },
    /// An input holds NaN (or infinity where that is rejected).
    #[error("non-finite value at index {index}")]
    NonFinite {
        /// The first index holding a non-finite value.
        index: usize,
    },
    /// A parameter is outside its allowed range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        name: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// Bytes handed to a decoder are not a valid encoding.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which encoding or field was being decoded.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A value cannot be represented by a codec (for example mixed signs
    /// for the same-sign mean codec).
    #[error("{codec} cannot encode this input: {reason}")]
    Unencodable {
        /// The codec.
        codec: &'static str,
        /// Why.
        reason: String,
    },
    /// A backend does not offer this capability.
    #[error("backend {backend} does not support {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The missing capability.
        what: String,
    },
    /// A peer did not send within the transport's timeout.
    #[error("rank {rank}: no message from rank {peer} within {timeout_ms} ms")]
    Timeout {
        /// The waiting rank.
        rank: usize,
        /// The silent peer.
        peer: usize,
        /// The timeout.
        timeout_ms: u64,
    },
    /// A peer failed (returned an error, panicked or was killed) and its
    /// link is gone.
    #[error("rank {rank}: peer rank {peer} failed")]
    PeerFailed {
        /// The rank that noticed.
        rank: usize,
        /// The failed peer.
        peer: usize,
    },
    /// A fault injected by a test (the thread transport's fault plan).
    #[error("rank {rank}: injected fault at step {step}")]
    Injected {
        /// The failing rank.
        rank: usize,
        /// The step it failed at.
        step: u64,
    },
    /// A rank was addressed that is not in the communicator.
    #[error("rank {rank} does not exist among {size} ranks")]
    NoSuchRank {
        /// The rank asked for.
        rank: usize,
        /// The communicator size.
        size: usize,
    },
    /// Ranks disagree on a parameter of a collective (dimension, k,
    /// algorithm): reported on every rank.
    #[error("ranks disagree on {what}: {detail}")]
    Disagreement {
        /// The parameter.
        what: &'static str,
        /// The values seen, by rank.
        detail: String,
    },
    /// A rank's code panicked (a failed check of a test suite, a bug):
    /// what an in-process cluster (threads, the simulator) returns for the
    /// rank, with the panic's message. Not a transport fault.
    #[error("rank {rank} panicked: {message}")]
    Panicked {
        /// The rank.
        rank: usize,
        /// The panic's message.
        message: String,
    },
    /// A transport-specific failure.
    #[error("transport error on rank {rank}: {detail}")]
    Transport {
        /// The rank.
        rank: usize,
        /// What happened.
        detail: String,
    },
    /// An allocation was refused (checked with `try_reserve`, so a request
    /// the machine cannot hold is an error, not an abort).
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory {
        /// What the buffer was for.
        what: &'static str,
        /// The bytes asked for.
        bytes: u64,
    },
    /// Another rank could not take part in a collective (invalid input, out
    /// of memory, bad parameters); every rank returns an error, the failing
    /// rank its own and the others this one.
    #[error("rank {rank} cannot take part: {detail}")]
    PeerError {
        /// The failing rank.
        rank: usize,
        /// What it reported.
        detail: String,
    },
    /// What is loaded does not fit what loads it: a setting, the rank
    /// count, a layer's shape, a part's kind or state version differs
    /// between what was saved and what loads it. Not damage (that is
    /// [`Error::Corrupt`]): load it into what was built alike, or convert
    /// it as `hint` says.
    #[error("mismatch: {what} is {saved} in what was saved, {here} here: {hint}")]
    Mismatch {
        /// What differs (`setting "lr"`, `the rank count`).
        what: String,
        /// The saved value, as a number where it is one.
        saved: String,
        /// The value of what loads it.
        here: String,
        /// What to do.
        hint: String,
    },
    /// A backend's device reported an error.
    #[error("device error in backend {backend}: {detail}")]
    Device {
        /// The backend's name.
        backend: &'static str,
        /// The device's message.
        detail: String,
    },
}

impl Error {
    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(what: &'static str, detail: impl fmt::Display) -> Self {
        Error::Corrupt {
            what,
            detail: detail.to_string(),
        }
    }

    /// Shorthand for [`Error::Mismatch`].
    pub fn mismatch(
        what: impl fmt::Display,
        saved: impl fmt::Display,
        here: impl fmt::Display,
        hint: impl fmt::Display,
    ) -> Self {
        Error::Mismatch {
            what: what.to_string(),
            saved: saved.to_string(),
            here: here.to_string(),
            hint: hint.to_string(),
        }
    }

    /// Shorthand for [`Error::InvalidParameter`].
    pub fn invalid(name: &'static str, reason: impl fmt::Display) -> Self {
        Error::InvalidParameter {
            name,
            reason: reason.to_string(),
        }
    }
}

/// `Result` with the workspace [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! What a collective of your own needs to speak the built-in ones' wire
//! formats: the admission every sparse allreduce's entry round agrees on
//! ([`admit`], in [`crate::SparseAllreduce::admit`]; [`enter`] where an
//! algorithm writes its own entry round), and the framing of
//! sparse pairs, blocks and streams for its body
//! ([`crate::SparseAllreduce::body`]). Every integer and value travels
//! little-endian. The trait's `allreduce_into` runs the body inside
//! [`crate::guard`]: a rank that fails part way (a corrupt message) then
//! abandons the transport, so its peers fail instead of waiting.
//!
//! ```
//! use sparse_coll::{Admission, Entered, Reduced, SparseAllreduce, Profile, Transport, wire};
//! use sparse_coll::dense::bruck_allgather;
//! use sparse_core::cost::Cost;
//! use sparse_core::{Result, SparseVec};
//!
//! /// An allgather of every rank's pairs, summed in rank order.
//! struct MyAllreduce;
//!
//! impl SparseAllreduce<f32> for MyAllreduce {
//!     fn name(&self) -> String {
//!         "my_allreduce".into()
//!     }
//!     fn lossless(&self) -> bool {
//!         true
//!     }
//!     fn cost(&self, prof: &Profile) -> Cost {
//!         Cost::new(prof.p as f64, prof.k_sum as f64)
//!     }
//!     fn admit(&mut self, _: &dyn Transport, v: &SparseVec<f32>) -> Option<Admission> {
//!         // What every rank checks and agrees on before the body, or all
//!         // fail: in the call's own entry round, or in one round with the
//!         // other calls of `sparse_coll::allreduce_jointly`.
//!         Some(wire::admit("my_allreduce", v, &[], Ok(())))
//!     }
//!     fn agreed_body(
//!         &mut self,
//!         t: &mut dyn Transport,
//!         v: &SparseVec<f32>,
//!         _: Entered,
//!         out: &mut Reduced<f32>,
//!     ) -> Result<Result<()>> {
//!         let mut msg = Vec::new();
//!         wire::put_block(&mut msg, v);
//!         let mut result = SparseVec::zeros(v.dim())?;
//!         for b in bruck_allgather(t, &msg)? {
//!             let mut rest: &[u8] = &b;
//!             let part = wire::take_block(&mut rest, v.dim(), 0, v.dim(), "my message")?;
//!             result = result.merge_sum(&part)?;
//!         }
//!         *out = Reduced {
//!             dropped: SparseVec::zeros(v.dim())?,
//!             result,
//!             ..Reduced::default()
//!         };
//!         Ok(Ok(()))
//!     }
//! }
//! # let out = sparse_coll::ThreadCluster::new(3).run(|t| {
//! #     let v = SparseVec::new(10, vec![t.rank() as u32], vec![1.0f32])?;
//! #     MyAllreduce.allreduce(t, &v)
//! # });
//! # assert!(out.iter().all(|r| r.as_ref().unwrap().result.nnz() == 3));
//! ```

use crate::{Admission, Entered, Transport};
use sparse_core::{Element, Result, SparseVec};

pub use crate::bytes::{le_bytes, le_u32s};
pub use crate::entry::entry_id;
pub use crate::frame::{
    decode_stream, encode_stream, put_block, put_pairs, read_pairs, split_where, stream_to_sparse,
    take_block,
};
pub use crate::transport::agree::{agree, agree_or_fail};
pub use crate::values::{Packed, WireValues};

/// The admission of a call to the sparse allreduce named `name`, as every
/// built-in one makes it ([`crate::SparseAllreduce::admit`]): checks the
/// input `v` (one O(nnz) pass) and that its values are finite, combines
/// that with this rank's `local` readiness (checks and allocations made
/// before the call), and lists what every rank must agree on: the
/// algorithm (by `name`), the dimension, the element type and `extra`
/// parameters, in that order. Communicates nothing: the call's own entry
/// round ([`Admission::enter`]) or a joint one
/// ([`crate::allreduce_jointly`]) agrees on it.
pub fn admit<E: Element>(
    name: &str,
    v: &SparseVec<E>,
    extra: &[(&'static str, u64)],
    local: Result<()>,
) -> Admission {
    crate::entry::admit(name, v, extra, local)
}

/// The entry of a sparse allreduce named `name`, as every built-in one
/// starts: checks the input `v` (one O(nnz) pass), combines it with this
/// rank's `local` readiness (checks and allocations made before the call),
/// then every rank agrees on the algorithm (by `name`), the dimension, the
/// element type and `extra` parameters. Any rank's failure reaches every
/// rank as an error ([`crate::agree_or_fail`]); it never abandons the
/// transport. Returns the [`Entered`] the body takes.
///
/// # Errors
/// This rank's error; `Error::PeerError`; `Error::Disagreement`; transport
/// errors.
pub fn enter<E: Element>(
    t: &mut dyn Transport,
    name: &str,
    v: &SparseVec<E>,
    extra: &[(&'static str, u64)],
    local: Result<()>,
) -> Result<Entered> {
    crate::entry::enter(t, name, v, extra, local)
}

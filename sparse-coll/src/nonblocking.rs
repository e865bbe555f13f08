//! Non-blocking collectives (SparCML sec. 7): start a collective, compute,
//! then wait for it. The collective runs on a progress thread that holds the
//! transport meanwhile, so communication overlaps the caller's computation.
//!
//! On MPI, initialise with at least `Threading::Serialized`
//! (`mpi::initialize_with_threading`): the progress thread makes the MPI
//! calls, and the caller must make none until it waits.

use crate::Transport;
use sparse_core::{Error, Result};
use std::thread::JoinHandle;

/// A collective in flight on its progress thread; [`Pending::wait`] returns
/// the transport and the collective's result.
#[derive(Debug)]
pub struct Pending<T, R> {
    handle: JoinHandle<(T, Result<R>)>,
}

/// Starts `collective` on `t` in a progress thread and returns at once.
pub fn start<T, R, F>(mut t: T, collective: F) -> Pending<T, R>
where
    T: Transport + Send + 'static,
    R: Send + 'static,
    F: FnOnce(&mut T) -> Result<R> + Send + 'static,
{
    Pending {
        handle: std::thread::spawn(move || {
            let out = collective(&mut t);
            (t, out)
        }),
    }
}

impl<T, R> Pending<T, R> {
    /// Whether the collective has finished (waiting will not block).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the collective and returns the transport and its result.
    ///
    /// # Panics
    /// If the collective panicked (the panic is resumed here).
    pub fn wait(self) -> (T, Result<R>) {
        match self.handle.join() {
            Ok(out) => out,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

/// Runs `collective` on `t` in a progress thread while `compute` runs on
/// this one, and returns both results: the borrowed-transport form of
/// [`start`] and [`Pending::wait`], for transports the caller does not own
/// (a [`crate::ThreadCluster`] rank's, say).
///
/// # Errors
/// The collective's error; [`Error::Panicked`] if it panicked.
pub fn overlap<T, R, C>(
    t: &mut T,
    collective: impl FnOnce(&mut T) -> Result<R> + Send,
    compute: impl FnOnce() -> C,
) -> (Result<R>, C)
where
    T: Transport + Send + ?Sized,
    R: Send,
{
    let rank = t.rank();
    std::thread::scope(|s| {
        let h = s.spawn(|| collective(t));
        let c = compute();
        let r = h.join().unwrap_or_else(|p| {
            Err(Error::Panicked {
                rank,
                message: format!(
                    "on the collective's progress thread: {}",
                    crate::transport::panic_message(p.as_ref())
                ),
            })
        });
        (r, c)
    })
}

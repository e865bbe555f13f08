//! What the in-process clusters (threads, simulated) share: the report of
//! the panics on their rank threads.

use sparse_core::Result;

/// The panics of one in-process cluster run: the first one a rank's code
/// raises is printed (by the panic hook in place, backtrace included), the
/// later ones of the same run are not, so that a check that fails on every
/// rank prints once, not once per rank; each rank still gets its own
/// message in its [`sparse_core::Error::Panicked`].
#[derive(Debug, Default)]
pub(crate) struct RunPanics(std::sync::Arc<std::sync::atomic::AtomicBool>);

thread_local! {
    /// The run whose rank this thread runs, while it runs it.
    static RUN: std::cell::RefCell<Option<std::sync::Arc<std::sync::atomic::AtomicBool>>> =
        const { std::cell::RefCell::new(None) };
}

/// Wraps the process's panic hook (once): a panic on a rank thread of a
/// run that has printed one already is not printed again. Panics of other
/// threads go to the hook as before.
fn quiet_later_rank_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let seen = RUN
                .try_with(|r| {
                    r.borrow()
                        .as_ref()
                        .map(|printed| printed.swap(true, std::sync::atomic::Ordering::SeqCst))
                })
                .ok()
                .flatten();
            match seen {
                Some(true) => {}
                Some(false) => {
                    prev(info);
                    eprintln!(
                        "note: the panics of this cluster's other ranks are not printed; \
                         each is in its rank's Error::Panicked"
                    );
                }
                None => prev(info),
            }
        }));
    });
}

/// Runs rank `rank`'s code of the run `run`, a panic inside it becoming
/// that rank's [`sparse_core::Error::Panicked`] with the panic's message:
/// how the in-process clusters report a failed check on a rank (as what it
/// is, not as a transport fault). Only the run's first panic is printed
/// ([`RunPanics`]).
pub(crate) fn catch_rank<T>(
    run: &RunPanics,
    rank: usize,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    quiet_later_rank_panics();
    let outer = RUN.with(|r| r.replace(Some(std::sync::Arc::clone(&run.0))));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    RUN.with(|r| *r.borrow_mut() = outer);
    out.unwrap_or_else(|p| {
        Err(sparse_core::Error::Panicked {
            rank,
            message: panic_message(p.as_ref()),
        })
    })
}

/// A panic's message: its payload when that is a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic whose payload is not a string".into())
}

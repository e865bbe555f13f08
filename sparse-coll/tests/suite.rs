//! The collective suite (`sparse_coll::testing`) on the thread transport,
//! for P = 1..=9, 16 and 17.

use sparse_coll::ThreadCluster;
use sparse_coll::testing::{algorithms, cases, collective_suite};

#[test]
fn collective_suite_on_threads() {
    for p in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17] {
        let want = cases(p).len() * algorithms(p, 1).len();
        for (r, res) in ThreadCluster::new(p)
            .run(collective_suite)
            .into_iter()
            .enumerate()
        {
            match res {
                Ok(runs) => assert_eq!(runs, want, "P={p} rank {r}"),
                Err(e) => panic!("P={p} rank {r}: {e}"),
            }
        }
    }
}

/// Issue 11.4: vectors built with `new_unchecked` from bad parts (out of
/// range, unsorted, duplicate, lengths that differ) on one rank make every
/// rank of every algorithm return an error; before, seven algorithms lost
/// the entries silently and Zen and OmniReduce panicked.
#[test]
fn bad_inputs_are_errors_on_every_rank() {
    use sparse_coll::testing::bad_input_suite;
    for p in 1..=9usize {
        for (r, res) in ThreadCluster::new(p)
            .run(bad_input_suite)
            .into_iter()
            .enumerate()
        {
            match res {
                Ok(calls) => assert!(calls > 0, "P={p} rank {r}"),
                Err(e) => panic!("P={p} rank {r}: {e}"),
            }
        }
    }
}

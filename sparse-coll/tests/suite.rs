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

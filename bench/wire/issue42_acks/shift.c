/* Shifted against ring exchanges over MPI, as sparse_coll's MpiTransport
 * sends them (a copy sent with MPI_Isend; the receive probed with
 * MPI_Improbe, then MPI_Mrecv; waits that poll and, with SLEEPY = 1, sleep
 * 20 us between polls): two phases of P - 1 rounds, each rank sending
 * BYTES to (r + s) % P and receiving from (r - s) % P in round s ("shift",
 * OmniReduce's push and pull) or always to r + 1 ("ring"). Rank 0 prints
 * the mean of REPS timed iterations (after one warm one) beside the
 * alpha-beta time at 100 Mb/s's calibrated 11.89 MB/s.
 *
 *   mpicc -O2 -o shift shift.c
 *   sudo scripts/netns-cluster.sh --rate 100mbit --nice -20 --ranks 4 [--queue fifo] -- \
 *       ./shift BYTES REPS ring|shift PROBE SLEEPY FLOORS
 *   (bench/RESULTS.md, "Acknowledgements first": ./shift 1000000 5 shift 1 1 0)
 *
 * FLOORS = 1 adds two MPI_Allgathers after each iteration, as
 * sparse-bench allreduce's floors. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int sleepy;
static void waitreq(MPI_Request *q) { int f = 0; while (1) { MPI_Test(q, &f, MPI_STATUS_IGNORE); if (f) return; if (sleepy) usleep(20); } }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, p; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &p);
  int bytes = atoi(argv[1]); int reps = atoi(argv[2]); const char *mode = argv[3]; int probe = atoi(argv[4]); sleepy = atoi(argv[5]);
  char *sb = malloc(bytes), *rb = malloc(bytes); memset(sb, 1, bytes);
  double tot[64];
  for (int it = 0; it < reps + 1; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int ph = 0; ph < 2; ph++)
    for (int s = 1; s < p; s++) {
      int sh = strcmp(mode, "ring") == 0 ? 1 : s;
      int to = (r + sh) % p, from = (r + p - sh) % p;
      MPI_Request sq, rq;
      char *copy = malloc(bytes); memcpy(copy, sb, bytes);
      MPI_Isend(copy, bytes, MPI_BYTE, to, 7, MPI_COMM_WORLD, &sq);
      if (probe) {
        MPI_Message m; MPI_Status st; int f = 0;
        while (1) { MPI_Improbe(from, 7, MPI_COMM_WORLD, &f, &m, &st); if (f) break; if (sleepy) usleep(20); }
        int n; MPI_Get_count(&st, MPI_BYTE, &n);
        MPI_Mrecv(rb, n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
      } else {
        MPI_Irecv(rb, bytes, MPI_BYTE, from, 7, MPI_COMM_WORLD, &rq); waitreq(&rq);
      }
      waitreq(&sq); free(copy);
    }
    if (it > 0) tot[it-1] = MPI_Wtime() - t0;
    if (atoi(argv[6])) { char *g = malloc((size_t)p * 1500000); MPI_Allgather(sb, 1500000 > bytes ? bytes : 1500000, MPI_BYTE, g, 1500000 > bytes ? bytes : 1500000, MPI_BYTE, MPI_COMM_WORLD); MPI_Allgather(sb, 1000, MPI_BYTE, g, 1000, MPI_BYTE, MPI_COMM_WORLD); free(g); }
  }
  double m = 0; for (int it = 0; it < reps; it++) m += tot[it]; m /= reps;
  if (r == 0) printf("floors=%s %s probe=%d sleepy=%d %d B: mean %.1f ms (alpha-beta %.1f)\n", argv[6], mode, probe, sleepy, bytes, m * 1e3, 2 * (p - 1) * bytes / 11.89e6 * 1e3);
  MPI_Finalize();
  return 0;
}

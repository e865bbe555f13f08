/* A blocking MPI ping-pong that says where its slow round trips went: for
 * each size, the round trips over 2 ms, their mean, and the run-queue wait
 * of both ranks' main threads in them (/proc/thread-self/schedstat: time
 * runnable but not running). docs/notes/2026-11-27-scheduler-stalls.md
 * runs it across two namespaces, with and without --nice:
 *   mpicc -O2 -o /tmp/pingpong-schedstat bench/scripts/pingpong-schedstat.c
 *   sudo scripts/netns-cluster.sh 2 1gbit [--nice -20] -- /tmp/pingpong-schedstat
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static double rd(void){FILE*f=fopen("/proc/thread-self/schedstat","r");unsigned long long a,b,c;fscanf(f,"%llu %llu %llu",&a,&b,&c);fclose(f);return b*1e-9;}
int main(int c,char**v){
  MPI_Init(&c,&v); int r,p; MPI_Comm_rank(MPI_COMM_WORLD,&r); MPI_Comm_size(MPI_COMM_WORLD,&p);
  if(r==0) printf("world %d\n",p);
  int sizes[]={1024,16384,65536,262144,1048576};
  char*buf=malloc(4194304); memset(buf,1,4194304);
  enum{N=40};
  for(int si=0;si<5;si++){int n=sizes[si]; double ts[N],w[N],w1[N];
    for(int i=0;i<N;i++){ MPI_Barrier(MPI_COMM_WORLD); double q=rd(); double t=MPI_Wtime();
      if(r==0){MPI_Send(buf,n,MPI_BYTE,1,0,MPI_COMM_WORLD);MPI_Recv(buf,n,MPI_BYTE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
      else {MPI_Recv(buf,n,MPI_BYTE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(buf,n,MPI_BYTE,0,0,MPI_COMM_WORLD);}
      ts[i]=MPI_Wtime()-t; w[i]=rd()-q;}
    MPI_Reduce(w,w1,N,MPI_DOUBLE,MPI_SUM,0,MPI_COMM_WORLD);
    if(r==0){int ns=0;double st=0,sw=0,ft=0;int nf=0;
      for(int i=0;i<N;i++){ if(ts[i]>2e-3){ns++;st+=ts[i];sw+=w1[i];} else {nf++;ft+=ts[i];}}
      printf("%8d: %2d/%d round trips over 2 ms: mean %8.2f ms, both ranks' runqueue wait in them %8.2f ms; the other %2d: mean %7.3f ms\n",n,ns,N,ns?st/ns*1e3:0,ns?sw/ns*1e3:0,nf,nf?ft/nf*1e3:0);}
  }
  MPI_Finalize();}

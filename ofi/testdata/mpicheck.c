// mpicheck runs MPI point-to-point and collectives and checks every byte:
// wildcard receives (MPI_ANY_SOURCE, MPI_ANY_TAG), probes (MPI_Probe,
// MPI_Improbe/MPI_Mrecv), MPI_Alltoall, MPI_Alltoallv and an MPI_Allreduce
// of more than 8 MiB. Rank 0 prints one line per check ("ok NAME" or
// "FAIL NAME") and the time of each collective; the exit status is
// non-zero if any rank found an error.
//
//	mpicc -O2 -o mpicheck mpicheck.c
//	mpirun -np 4 ./mpicheck [alltoall bytes per pair, default 262144]
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, bad;

static void report(const char *name, int localbad, double secs)
{
	int any = 0;

	MPI_Allreduce(&localbad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		if (secs > 0)
			printf("%s %s %.6f s\n", any ? "FAIL" : "ok", name, secs);
		else
			printf("%s %s\n", any ? "FAIL" : "ok", name);
		fflush(stdout);
	}
	bad += any;
}

static unsigned char pattern(int from, int to, size_t i)
{
	return (unsigned char)(from * 31 + to * 7 + i * 13);
}

int main(int argc, char **argv)
{
	size_t pair = argc > 1 ? strtoul(argv[1], NULL, 0) : 262144;
	int iters = argc > 2 ? atoi(argv[2]) : 5;
	int i, j, lbad;
	double t;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	// Point-to-point with wildcards: every rank sends rank 0 three
	// messages with distinct tags; rank 0 takes them in any order.
	lbad = 0;
	if (rank == 0) {
		int seen[3 * 64] = { 0 };
		for (i = 0; i < 3 * (size - 1); i++) {
			int msg[2];
			MPI_Status st;
			MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			if (msg[0] != st.MPI_SOURCE || msg[1] != st.MPI_TAG || st.MPI_TAG < 10 || st.MPI_TAG > 12 ||
			    st.MPI_SOURCE >= 64 || seen[st.MPI_SOURCE * 3 + st.MPI_TAG - 10]++)
				lbad++;
		}
	} else {
		for (i = 10; i <= 12; i++) {
			int msg[2] = { rank, i };
			MPI_Send(msg, 2, MPI_INT, 0, i, MPI_COMM_WORLD);
		}
	}
	report("p2p-wildcard", lbad, 0);

	// Probes: rank 1 sends, rank 0 probes for the size, then takes the
	// message by matched probe.
	lbad = 0;
	if (size > 1 && rank == 1) {
		char big[100000];
		for (i = 0; i < (int)sizeof(big); i++)
			big[i] = (char)i;
		MPI_Send(big, sizeof(big), MPI_CHAR, 0, 77, MPI_COMM_WORLD);
		MPI_Send(big, 1000, MPI_CHAR, 0, 78, MPI_COMM_WORLD);
	} else if (size > 1 && rank == 0) {
		MPI_Status st;
		MPI_Message m;
		int n = 0, flag = 0;
		char *buf;
		MPI_Probe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
		MPI_Get_count(&st, MPI_CHAR, &n);
		buf = malloc(n);
		MPI_Recv(buf, n, MPI_CHAR, st.MPI_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		for (i = 0; i < n; i++)
			if (buf[i] != (char)i)
				lbad++;
		if (n != 100000)
			lbad++;
		while (!flag)
			MPI_Improbe(1, 78, MPI_COMM_WORLD, &flag, &m, &st);
		MPI_Get_count(&st, MPI_CHAR, &n);
		MPI_Mrecv(buf, n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
		if (n != 1000 || buf[999] != (char)999)
			lbad++;
		free(buf);
	}
	report("probe-mprobe", lbad, 0);

	// MPI_Alltoall: pair bytes from every rank to every rank.
	unsigned char *sb = malloc(pair * size), *rb = malloc(pair * size);
	for (j = 0; j < size; j++)
		for (size_t k = 0; k < pair; k++)
			sb[j * pair + k] = pattern(rank, j, k);
	// One untimed all-to-all first: the time is the steady state's, not
	// that of the connections every transport makes on first use.
	MPI_Alltoall(sb, (int)pair, MPI_BYTE, rb, (int)pair, MPI_BYTE, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (i = 0; i < iters; i++)
		MPI_Alltoall(sb, (int)pair, MPI_BYTE, rb, (int)pair, MPI_BYTE, MPI_COMM_WORLD);
	t = (MPI_Wtime() - t) / iters;
	lbad = 0;
	for (j = 0; j < size; j++)
		for (size_t k = 0; k < pair; k++)
			if (rb[j * pair + k] != pattern(j, rank, k))
				lbad++;
	{
		char name[64];
		snprintf(name, sizeof(name), "alltoall-%zu", pair);
		report(name, lbad, t);
	}

	// MPI_Alltoallv: rank r sends (r+1)*(j+1)*100 bytes to rank j.
	int *sc = calloc(size, sizeof(int)), *sd = calloc(size, sizeof(int));
	int *rc = calloc(size, sizeof(int)), *rd = calloc(size, sizeof(int));
	int stot = 0, rtot = 0;
	for (j = 0; j < size; j++) {
		sc[j] = (rank + 1) * (j + 1) * 100;
		sd[j] = stot;
		stot += sc[j];
		rc[j] = (j + 1) * (rank + 1) * 100;
		rd[j] = rtot;
		rtot += rc[j];
	}
	unsigned char *svb = malloc(stot), *rvb = malloc(rtot);
	for (j = 0; j < size; j++)
		for (i = 0; i < sc[j]; i++)
			svb[sd[j] + i] = pattern(rank, j, i);
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	MPI_Alltoallv(svb, sc, sd, MPI_BYTE, rvb, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
	t = MPI_Wtime() - t;
	lbad = 0;
	for (j = 0; j < size; j++)
		for (i = 0; i < rc[j]; i++)
			if (rvb[rd[j] + i] != pattern(j, rank, i))
				lbad++;
	report("alltoallv", lbad, t);

	// MPI_Allreduce of 12 MiB of doubles.
	size_t n = 12 << 20 >> 3;
	double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
	for (size_t k = 0; k < n; k++)
		in[k] = (double)(rank + 1) * (double)(k % 1000);
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	t = MPI_Wtime() - t;
	lbad = 0;
	double ranks = (double)size * (size + 1) / 2;
	for (size_t k = 0; k < n; k++)
		if (out[k] != ranks * (double)(k % 1000))
			lbad++;
	report("allreduce-12MiB", lbad, t);

	if (rank == 0)
		printf("%s: %d ranks, %d checks failed\n", bad ? "FAIL" : "PASS", size, bad);
	MPI_Finalize();
	return bad ? 1 : 0;
}

/*
 * test_init_comm.c - hvd_init_comm with communicators it must refuse, and with a
 * sub-communicator it must use as the whole world: MPI_COMM_NULL and an intercommunicator give
 * HVD_ERR_INVALID_ARG with a message (the process lives on: Open MPI's fatal default error
 * handler must not fire); on the even ranks of MPI_COMM_WORLD, ranks and sizes are those of the
 * sub-communicator and an all-reduce sums over it only.
 * Main thread only.
 */
#include <mpi.h>
#include <string.h>

#include "mpitest.h"

int main(int argc, char **argv) {
    int provided = 0, world_rank = 0, world_size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    mt_ctx t;
    mt_init(&t, world_rank, world_size);

    mt_begin(&t, "hvd_init_comm(MPI_COMM_NULL) -> HVD_ERR_INVALID_ARG");
    if (MT_EXPECT(&t, hvd_init_comm(MPI_COMM_NULL), HVD_ERR_INVALID_ARG))
        MT_CHECK(&t, strstr(hvd_last_error(), "MPI_COMM_NULL") != NULL, "message: %s", hvd_last_error());
    MT_CHECK(&t, hvd_is_initialized() == 0, "initialized after a refused hvd_init_comm");
    mt_end(&t);

    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    if (world_size >= 2) {
        mt_begin(&t, "hvd_init_comm(an intercommunicator) -> HVD_ERR_INVALID_ARG");
        MPI_Comm inter;
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, world_rank % 2 ? 0 : 1, 7, &inter);
        if (MT_EXPECT(&t, hvd_init_comm(inter), HVD_ERR_INVALID_ARG))
            MT_CHECK(&t, strstr(hvd_last_error(), "intercommunicator") != NULL, "message: %s", hvd_last_error());
        MPI_Comm_free(&inter);
        mt_end(&t);
    }

    mt_begin(&t, "hvd_init_comm on the %s ranks: their own world", world_rank % 2 ? "odd" : "even");
    int half_rank = 0, half_size = 1;
    MPI_Comm_rank(half, &half_rank);
    MPI_Comm_size(half, &half_size);
    if (MT_EXPECT(&t, hvd_init_comm(half), HVD_OK)) {
        int r = -1, s = -1;
        hvd_rank(&r);
        hvd_size(&s);
        MT_CHECK(&t, r == half_rank && s == half_size, "rank/size %d/%d, expected %d/%d", r, s, half_rank, half_size);
        int32_t x = world_rank, expected = 0;
        for (int w = world_rank % 2; w < world_size; w += 2) expected += w;
        if (MT_EXPECT(&t, hvd_allreduce("init_comm.sum", &x, &x, 1, HVD_INT32, HVD_SUM), HVD_OK))
            MT_CHECK(&t, x == expected, "sum over the sub-communicator %d, expected %d", x, expected);
        MT_EXPECT(&t, hvd_shutdown(), HVD_OK);
    }
    mt_end(&t);
    MPI_Comm_free(&half);
    int code = mt_exit_code(&t);
    MPI_Finalize();
    return code;
}

/* comm_mpi_stub.c - linked when the build has no MPI: asking for the MPI
 * communicator (an mpirun / srun launch) is an error that says so, never a
 * silent run of N independent processes. */
#include "comm.h"
#include "errmsg.h"

Comm *comm_mpi_create(int timeout_s, char *err, size_t errlen) {
    (void)timeout_s;
    set_err(err, errlen,
            "this hgrn was built without MPI (no MPI found at build time), so it cannot run "
            "under mpirun or srun; install libopenmpi-dev openmpi-bin and rebuild");
    return NULL;
}

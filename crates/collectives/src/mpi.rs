//! MPI transport (feature `mpi`).

"""The op rules (registered in simdist/faces/op_rules.py when these modules are imported)."""
from . import attention, copies, ctc, cuda_dtypes, deterministic, factories, functional_collectives, host_syncs, intdiv, meta_fixes, metadata, norms, outs, rnn_cells, scans, softmax, \
    sync_batchnorm, tf32  # noqa: F401

"""torch.compile(mode="reduce-overhead") of a model whose outputs the loop keeps across steps (a list of per-step
predictions, read after the loop), as a user moving an evaluation loop to CUDA graphs writes it first. On a GPU,
cudagraph trees replay into static output buffers: the next replay overwrites the earlier outputs, and reading one
raises "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" (or, cloned too late,
gives the last step's values). simdist does not model CUDA graphs, so the first call of the compiled model must be
refused by name; running it eagerly would give every step its own correct output, which the GPU does not.

EXPECTED: error
ERROR: UnsupportedOperation
WORLD_SIZE: 1
MODELLED ON: https://pytorch.org/docs/stable/torch.compiler_cudagraph_trees.html ("Limitations": outputs of a
cudagraph-tree run are overwritten by the next run unless cloned or torch.compiler.cudagraph_mark_step_begin() is
called); torch/_inductor/__init__.py list_mode_options ("reduce-overhead": {"triton.cudagraphs": True});
torch/_inductor/cudagraph_trees.py (the "accessing tensor output of CUDAGraphs that has been overwritten" check).
RULE: notes x10: a torch.compile'd call runs eagerly in simdist, except where eager execution cannot stand for what
the GPU runs: CUDA graphs and user backend callables are refused at the first call.
"""
import torch
import torch.nn as nn


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    preds = []
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(16, 32, device="cuda")
            preds.append(compiled(x))          # refused here (the first call compiles)
    print([p.sum().item() for p in preds])     # on a GPU: the overwritten-output RuntimeError


if __name__ == "__main__":
    main()

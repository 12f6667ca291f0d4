"""nmt-train: train a Transformer on a parallel corpus (`python -m model.train`, `torchrun ... -m model.train`).

loop.py         main and the training loop: epochs, updates, the stop and the state saved mid-epoch
run.py          set_up: the Run a process works with (flags, tokenizer, data, model, teachers, optimizer, progress)
args.py         the command line and its checks
data.py         the training pairs in batches of similar length, collated to tensors
bpe_dropout.py  each epoch's sources cut anew (--bpe-dropout), kept for --resume
loss.py         the batch's loss: label smoothing, R-Drop, knowledge distillation
validate.py     validation, the best checkpoint, the average of the last epochs
state.py        what --resume continues from; --init-from's weights grown by --grow-encoder
distributed.py  torchrun's processes, what rank 0 shares, the signals that stop a run"""

from model.train.loop import main

__all__ = ["main"]

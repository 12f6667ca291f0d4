"""`python -m model.train ...` and `torchrun ... -m model.train ...`: nmt-train."""

from model.train.loop import main

if __name__ == "__main__":
    main()

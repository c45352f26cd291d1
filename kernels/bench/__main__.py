"""`python -m kernels.bench`: the paged-attention benchmark (see attention.py)."""
import sys

from .attention import main

sys.exit(main())

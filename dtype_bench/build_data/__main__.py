"""``python -m dtype_bench.build_data VERB ...`` (``main``)."""
import sys

from dtype_bench.build_data import main

sys.exit(main())

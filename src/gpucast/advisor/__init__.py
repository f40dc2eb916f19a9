"""Cost-benefit advice: which GPU type, how many, what batch size and precision, and whether to share.

``advise(job, ...)`` searches GPU types, data-parallel counts, batch sizes, precisions and GPU
shares (:mod:`gpucast.advisor.search`), prices every option from a price table
(:mod:`gpucast.advisor.prices`), turns each prediction into time and money per epoch and per run
with ranges from the step-time interval (:mod:`gpucast.advisor.options`), and picks the Pareto front
of time against cost and a recommendation under a deadline and/or a budget
(:mod:`gpucast.advisor.front`). It is a consumer of ``gpucast.api.explain`` like the simulator:
no number here is re-derived.

For a job with a ``parallel`` group, or with ``plans=True``, the options are parallel plans
instead (:mod:`gpucast.advisor.plans`): GPU type x count (beyond one node) x sharding x tensor x
pipeline x recompute x micro-batch, the global batch kept; prices, the front and the
recommendation apply to them unchanged.

Several one-GPU jobs that would share one GPU: :func:`gpucast.advisor.pack.pack` (every sharing
mode and the best MIG layout for the set, which keeps the most of their speed and why).
"""

from gpucast.advisor.advice import Advice, advise
from gpucast.advisor.options import FITS, NO, RISKY, Option, PlanFields
from gpucast.advisor.prices import DEFAULT_PRICES, Price, PriceError, PriceTable
from gpucast.advisor.prices import load as load_prices
from gpucast.advisor.search import AdviseError

__all__ = ["Advice", "AdviseError", "Option", "PlanFields", "Price", "PriceError", "PriceTable", "advise",
           "load_prices", "FITS", "RISKY", "NO", "DEFAULT_PRICES"]

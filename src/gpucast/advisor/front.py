"""The choice among priced options: the Pareto front of time against cost, and the recommendation.

* **Front**: among the options that fit in memory (``fits`` or ``risky``), those no other option
  beats on both time per epoch and cost per epoch (lower or equal on both, lower on one). Equal
  options keep the first.
* **Recommendation** under a ``deadline`` (seconds for the whole run) and/or a ``budget`` (USD for
  the whole run), judged at the point estimates: with a deadline (and a budget or not), the
  cheapest option that meets both; with a budget only, the fastest within it; with neither, the
  cheapest. Options whose memory interval fits are preferred; a ``risky`` one is recommended only
  when no safe option meets the constraints, and says so. An option that does not fit is never
  recommended. When nothing meets the constraints there is no recommendation, and the message
  names the fastest (for a deadline) or the cheapest (for a budget) option there is.
"""

from __future__ import annotations

from typing import Sequence

from gpucast.advisor.options import FITS, NO, Option
from gpucast.advisor.units import duration as _h, usd


def pareto(options: Sequence[Option]) -> list[int]:
    """Indices of the non-dominated options (time per epoch, cost per epoch), fitting ones only, by time."""
    idx = [i for i, o in enumerate(options) if o.memory_fit != NO]
    idx.sort(key=lambda i: (options[i].epoch_s, options[i].cost_per_epoch, i))
    front, best_cost = [], float("inf")
    for i in idx:  # by time ascending: an option is on the front iff it is cheaper than every faster one
        if options[i].cost_per_epoch < best_cost:
            front.append(i)
            best_cost = options[i].cost_per_epoch
    return front


def recommend(options: Sequence[Option], deadline_s: float | None = None,
              budget_usd: float | None = None) -> tuple[int | None, str]:
    """(index of the recommended option or None, a one-line message)."""
    fitting = [i for i, o in enumerate(options) if o.memory_fit != NO]
    if not fitting:
        return None, "no option fits in memory on these GPUs (try a smaller batch or a larger GPU)"

    def meets(o: Option) -> bool:
        return (deadline_s is None or o.run_s <= deadline_s) and (budget_usd is None or o.cost_per_run <= budget_usd)

    ok = [i for i in fitting if meets(options[i])]
    if not ok:
        fastest = min(fitting, key=lambda i: (options[i].run_s, options[i].cost_per_run))
        cheapest = min(fitting, key=lambda i: (options[i].cost_per_run, options[i].run_s))
        f, c = options[fastest], options[cheapest]
        wants = []
        if deadline_s is not None:
            wants.append(f"the deadline of {_h(deadline_s)}")
        if budget_usd is not None:
            wants.append(f"the budget of {usd(budget_usd)}")
        return None, (f"no option meets {' and '.join(wants)}: the fastest is {f.id} ({_h(f.run_s)}, "
                      f"{usd(f.cost_per_run)}); the cheapest is {c.id} ({_h(c.run_s)}, {usd(c.cost_per_run)})")
    safe = [i for i in ok if options[i].memory_fit == FITS]
    pool = safe or ok
    if budget_usd is not None and deadline_s is None:
        best = min(pool, key=lambda i: (options[i].run_s, options[i].cost_per_run))
        why = "the fastest within the budget"
    else:
        best = min(pool, key=lambda i: (options[i].cost_per_run, options[i].run_s))
        why = "the cheapest that meets the deadline" if deadline_s is not None else "the cheapest"
        if deadline_s is not None and budget_usd is not None:
            why += " and the budget"
    o = options[best]
    msg = f"recommended: {o.id}, {why} ({_h(o.run_s)}, {usd(o.cost_per_run)} for the run)"
    if deadline_s is not None and o.run_interval_s[1] > deadline_s:
        msg += f"; at the step-time interval's upper end it takes {_h(o.run_interval_s[1])}, past the deadline"
    if budget_usd is not None and o.cost_per_run_interval[1] > budget_usd:
        msg += f"; at the interval's upper end it costs {usd(o.cost_per_run_interval[1])}, over the budget"
    if not safe:
        msg += "; RISKY: it fits only below the memory interval's upper end (no option that surely fits meets the constraints)"
    return best, msg

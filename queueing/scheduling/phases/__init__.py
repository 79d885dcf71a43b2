"""The phases of one scheduling cycle, one module each, in the order ``run_cycle`` calls them:

* ``commit`` — ``CycleBook``: the quota tree and placer state with every admitted workload charged,
  and every decision of the cycle as it is made (admissions, preemption plans, pending reasons);
* ``drain`` — ``stopPolicy: HoldAndDrain`` evicts the admitted workloads of stopped queues;
* ``nominate`` — ``Nominator``: the eligible pending workloads by ClusterQueue, and the best head
  over all of them, again and again;
* ``assign`` — quota, flavors and gang placement for a head: whole, or partially down to ``minCount``;
* ``preempt`` — ``Preemptor``: a plan that evicts a minimal set of admitted workloads so that a head fits.

All pure (no clock, no I/O): ``queueing.scheduling.cycle.run_cycle`` is the short sequence of calls.
"""

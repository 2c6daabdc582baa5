"""duograph.passes: the pass manager and graph-to-graph rewrites (cleanup, fusion, planning).

The passes themselves arrive with the optimisation issue; the package exists so the layout of
DESIGN.md holds from the start.
"""

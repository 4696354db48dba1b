"""Boxes: one sealed box (create -> verify -> start -> programs -> remove,
confirmed), one program in it, the receipt built from what happened, the warm
pool, removal and the sweep, and returned files."""

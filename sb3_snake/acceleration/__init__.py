"""The acceleration layer: the speed switches (``settings``), what is active and why
(``optimizations``), measuring ``auto`` on this machine (``autotune``), threads, and the
capability report."""

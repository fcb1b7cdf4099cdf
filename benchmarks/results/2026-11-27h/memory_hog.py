"""A memory-bandwidth hog on one core: streams a 256 MB array until killed (the loaded machine of final1, reproduced)."""
import numpy as np
a = np.ones(32 << 20)  # 256 MB of float64
while True:
    a.sum()

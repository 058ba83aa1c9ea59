"""NumPy references: one plain, short function per kernel family, computed in float64."""

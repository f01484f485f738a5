"""How a loaded model runs on this machine: the dtype probe, packed and int8 linears, weights offloaded to disk."""

"""Making the model itself run faster on the machine at hand, without changing what it computes."""

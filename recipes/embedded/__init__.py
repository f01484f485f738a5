"""The embedded demo model's recipe: its tokenizer, pretraining stages, heads data and export."""

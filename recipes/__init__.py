"""Recipes: the commands that rebuild what the package ships (the embedded model, SmolLM2's heads, the samples),
with their data generators. Nothing here is imported by `locret_cli`."""

"""The tensor core: chunked prefill (`engine`), the bounded cache and its positions (`cache`, `rope`), what a layer
computes and attends to (`capture`, `probe`), retaining heads and eviction policies (`heads`, `policies/`), and where
each kept entry came from (`sources`, `citations`). Tensors and settings only: no files, no flags, no printing."""

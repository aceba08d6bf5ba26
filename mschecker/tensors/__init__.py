"""Tensors in and out: the file formats users exchange (io), what a model declares about a tensor (meta), named
sets of tensors (sets) and golden directories with their manifest (golden_store)."""

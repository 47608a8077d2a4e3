"""`electra demo`: the whole pipeline on a small real corpus (`run`), the corpus it fetches
(`corpus`), and the downstream check that ends its summary (`check`)."""

"""Cross-View Training (dissertation chapter 4): a CNN-BiLSTM tagger/parser trained on labeled
sentences and, alternately, on unlabeled ones, where auxiliary modules with restricted views of
the input learn to match the full model's predictions.

Modules: `conll` (readers/writers), `tags` (BIOES), `unlabeled` (raw text to word sentences),
`vocab`, `batch`, `encoder`, `tagging` and `parsing` (prediction modules), `model`, `config`,
`train` (the loop), `run` (train/evaluate/predict entry points) and `cli`.
"""

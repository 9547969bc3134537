"""SQuAD v1.1 / v2.0 question answering (ELECTRA-style).

* `squad_eval`  - the official EM/F1 metrics (v1.1 and v2.0) and their command line;
* `squad_data`  - SQuAD JSON reader and sliding-window features (numpy arrays + metadata);
* `postprocess` - head outputs -> answer texts, n-best lists, null odds, prediction files;
* `qa_head`     - ELECTRA's QA head (joint start/end beam + answerability) and its loss.

Submodules are not imported here, so `python -m finetune.qa.squad_eval` stays light (no Keras).
"""

"""Elastic ConvBERT: DynaBERT's width- and depth-adaptive sub-networks for ConvBERT.

One fine-tuned ConvBERT, rewired so every smaller size is a prefix of it, can be cut to any
(heads, FFN width, depth) sub-network. ConvBERT has two kinds of heads (self-attention and
span-based dynamic convolution, sharing the query) and optionally grouped FFN; the mapping is in
../shared/reference/evaluation-and-dynabert.md §2.

* `importance.py`: head importance of both kinds (gradient of the task loss w.r.t. a head mask)
  and FFN-neuron importance (first-order Taylor, within groups), on a held-out slice of train.
* `rewire.py`: the function-preserving permutation putting the most important units first.
* `slicing.py`: `Subnet` (which heads / neurons / layers a size keeps; the per-size head-count
  table; DynaBERT's layer-keeping rule) and `sliced_forward`, the sub-network's forward pass on
  slices of the full model's variables.
* `extract.py`: a sub-network as a dense, smaller ConvBertConfig + weights that
  `ConvBertModel.from_pretrained` loads (Hugging Face format only with every head), and its
  parameters and FLOPs.

* `train.py`: DynaBERT-W and DynaBERT (width- then depth-adaptive distillation from the fixed
  fine-tuned teacher) as a Task of the training core; optional hard-label "final" phase.
* `grid.py`: every (width, depth) cell on a GLUE dev set, DynaBERT-trained and plain, with
  parameters and FLOPs: grid.md, grid.json, grid.png.
* `run.py`: the command (`python -m elastic.run`): rewire, train the phases per seed, the grid.
* `pretrain.py`: elastic pre-training (`python -m elastic.pretrain`): ELECTRA pre-training whose
  step also trains the discriminator's smallest cell + sampled cells (sandwich rule), then every
  cell exported (`--extract_cells`). Cells are (width, depth), or with --elastic_hidden_sizes
  the rebuttal's (layers, hidden size) grid (slicing.py `Subnet.for_hidden`).

Layering: the model-level modules (importance, rewire, slicing, extract) depend on model/ only;
train/run/grid add the training core, GLUE fine-tuning and the tokenizer; pretrain adds
pre-training, the training core and data. Nothing in model/ imports elastic/
(tests/elastic/test_extract.py `test_layering`). docs/DYNABERT.md has the method, the choices and
the commands.
"""

"""Elastic ConvBERT: DynaBERT's width- and depth-adaptive sub-networks for ConvBERT (issue 17).

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

Still to come (later parts of issue 17): width- and depth-adaptive distillation training
(DynaBERT-W and DynaBERT), the (width, depth) evaluation grid, elastic pre-training and
docs/DYNABERT.md.

Depends on model/ only; nothing in model/ imports it.
"""

"""Training data at the paper's scale: ImageNet-style JPEGs packed into tar shards, staged to
node-local storage, decoded by worker processes at the core's limit (docs/data.md).

The front door (``front_door``): ``open_source(path, train=..., comm=comm)`` opens a rank's
share of a shard folder, class-folder tree or list file; ``make_loader(source, batch_size,
decoder="turbo"|"dali")`` makes its Chainer iterator. Behind it:

- ``jpeg``: the decoder (``_jpeg.c`` over libjpeg-turbo: only the crop's region, DCT-scaled,
  resized and mirrored in C);
- ``transforms``: the standard ImageNet recipe's boxes, drawn from key, epoch and seed;
- ``shards``, ``manifest``: the WebDataset layout (``<key>.jpg`` + ``<key>.cls``) and its
  manifest; ``sources``: what each rank reads per epoch;
- ``loader``, ``worker`` (``worker_protocol``: their messages), ``batch``: batches of uint8
  images from worker processes, and the converter that normalises them on the device;
  ``iterator``: what loaders share (epochs, ``serialize``, the batches in flight); ``dali``:
  the same batches decoded by NVIDIA DALI (GPU, or its CPU mode);
- ``cpus``: how many workers a process's CPUs take (the loaders' decoders, pack's builders);
- ``stage``: ``chainermn-rt data stage`` (node-local copies, docs/staging.md);
- ``writers/``: what writes data, apart from the reading path: ``pack`` (``chainermn-rt data
  pack``) and ``synthetic`` (``data synth``, made-up JPEGs).
"""

from chainermn_rt.data.front_door import DECODERS, check_decoder, make_loader, open_source

__all__ = ["DECODERS", "check_decoder", "make_loader", "open_source"]

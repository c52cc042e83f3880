"""Training data at the paper's scale: ImageNet-style JPEGs packed into tar shards, staged to
node-local storage, decoded by worker processes at the core's limit.

- ``jpeg``: the decoder (libjpeg-turbo; only the crop's region, DCT-scaled, resized in C);
- ``transforms``: the standard ImageNet recipe's boxes, deterministic per sample and epoch;
- ``manifest``, ``shards``: the WebDataset layout (``<key>.jpg`` + ``<key>.cls``) and its
  manifest; each rank reads only its own shards;
- ``pack``: ``chainermn-rt data pack`` (a class-folder tree or list file to shards);
- ``loader``: batches of uint8 images from worker processes, normalised on the device.
"""

"""What writes training data, apart from what reads it (``chainermn_rt.data``'s other modules):

- ``pack``: ``chainermn-rt data pack``, images into tar shards with a manifest (resumable);
- ``synthetic``: ``chainermn-rt data synth``, ImageNet-like JPEGs made up on the spot.

Both write the layouts the readers own (``shards``, ``manifest``).
"""

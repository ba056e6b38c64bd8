"""The format core: TFRecord framing and CRC32C, the Example codec, index files, readers
and writers (local, or remote through ranged reads), random access, frame copies, sharding
of files into pieces read exactly once, and the key index.

Layer: above ``tfrecord_io.storage`` (paths are opened there), below the dataset layout.
Imports neither Beam nor torch at module level. The public names are re-exported by
``tfrecord_io`` itself (``import tfrecord_io as tfio``); this package's ``__init__``
imports nothing, so importing one module here does not load the rest.
"""

# tfrecord-io worker and job image.
#
# Based on Apache Beam's Python SDK image of the Beam version constraints/pinned.txt pins
# (the release the Flink / Spark job servers in runners/ are built from), so it serves
# both as the SDK harness of Flink / Spark / Dataflow workers
#   --environment_type=DOCKER --environment_config=<this image>     (Flink, Spark)
#   --sdk_container_image=<this image>                              (Dataflow)
# and, with the entry point overridden, as a place to launch jobs:
#   docker run --rm -v "$PWD:/work" -w /work --entrypoint tfrecord-io <image> build configs/datasets/demo.yaml
#
# Build (the one version source is tfrecord_io/_version.py):
#   docker build -t tfrecord-io:$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' tfrecord_io/_version.py) .
# The Beam version here must equal constraints/pinned.txt's apache-beam (a test checks
# it): workers and launcher must run the same SDK. For another Beam release, change both
# (FROM apache/beam_python3.X_sdk:<version>, and a constraints file of that release).
FROM apache/beam_python3.11_sdk:2.62.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# libsndfile for soundfile (audio), a C compiler for the optional C core.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libsndfile1 gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tfrecord-io
COPY pyproject.toml setup.py README.md LICENSE ./
COPY constraints ./constraints
COPY tfrecord_io ./tfrecord_io
COPY configs ./configs

# Exact versions of the pinned lane, so the image runs what CI tested; the image's
# apache-beam is already the pinned version, so pip keeps it.
RUN pip install -c constraints/pinned.txt ".[media,aws,report]" \
    && python -c "import tfrecord_io, tfrecord_io.transforms, tfrecord_io.pipelines.cli; print('tfrecord-io', tfrecord_io.__version__)"

# Keep Beam's SDK harness boot as the entry point (what runners start).
ENTRYPOINT ["/opt/apache/beam/boot"]

"""Records as the node's API carries them: the embedded formats (JSON, binary, RecordBatch content
types), the columns of a produce request and its results, and the default partitioner."""

"""Protobuf messages tracedb reads (package `tracedb.tf`, field numbers as upstream).

The *_pb2.py files are generated and committed; edit the .proto files and run
`python tracedb/proto/regenerate.py`.
"""

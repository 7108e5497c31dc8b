"""Model format work: conversion to ONNX (``convert``) and its quality check (``quality``)."""

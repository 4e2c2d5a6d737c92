"""Exercises: write a rung yourself and have it graded.

``tilemm learn RUNG`` writes the rung's kernel with its lesson left as a TODO (skeleton);
``tilemm grade FILE`` runs the learner's file on awkward shapes against the reference, counts its
loads and stores in the CUDA simulator against the rung's own, and names the lesson a fault or a
wrong count points to (grading); on a GPU it also times it against the rung, the rung before and
cuBLAS.
"""

"""Data for the six scenarios: embedded synthetic data (default, no network), the real
data sets by hub id (OpenWebText, EUR-Lex 57k) and local files of the same schema.

INTERFACE STUB - being implemented. Contract used by train.py:

    data = load_task_data(run)          # run: resolved RunConfig
    data.vocab_size, data.num_labels, data.pad_id, data.bos_id, data.mask_id, data.loss_floor
    next_batch = data.sampler(batch_size, device, seed)   # () -> dict of device tensors
    val = data.val_batches(batch_size, n_batches, device)  # fixed list of dicts

Batches:
    clm:         {"input_ids": LongTensor[B,T], "labels": LongTensor[B,T]}  (labels = next token)
    mlm:         {"input_ids": LongTensor[B,T] (masked), "labels": LongTensor[B,T] (-100 = not scored)}
    multilabel:  {"input_ids", "attention_mask": LongTensor[B,T], "labels": FloatTensor[B,L] multi-hot}
    singlelabel: {"input_ids", "attention_mask", "labels": LongTensor[B]}
"""

"""Hugging Face Trainer-style fine-tuning script."""

import argparse

import torch
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert-base-uncased")
    parser.add_argument("--device", default="cuda")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("this script needs a GPU")
    model = AutoModelForSequenceClassification.from_pretrained(args.model)
    model.to(args.device)
    training_args = TrainingArguments(output_dir="out", per_device_train_batch_size=8,
                                      dataloader_pin_memory=True, fp16=False)
    trainer = Trainer(model=model, args=training_args)
    trainer.train()
    torch.cuda.empty_cache()
    print("memory", torch.cuda.memory_allocated(), torch.cuda.memory_reserved())


if __name__ == "__main__":
    main()

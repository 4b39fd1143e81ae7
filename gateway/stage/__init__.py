"""The per-record stage without Kafka: what the processor does with one record of
`intake` or `requests`, over a key's state it is handed. The processor runs it inside its
transactions (gateway/processor/); replay and what-if (gateway/audit/) run the same code
over the audit trail's state."""

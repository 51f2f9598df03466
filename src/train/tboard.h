/* tboard.h - a run's TensorBoard event file (train.tensorboard = 1;
 * DESIGN.md section 7): the scalars of every metrics.jsonl record, written
 * beside it as events.out.tfevents.<time>.<host>, one file per process that
 * trains the run.
 *
 * The format, by hand: TFRecord framing (uint64 length, masked CRC-32C of
 * the length, the data, masked CRC-32C of the data; little-endian) around
 * tensorflow.Event protobuf messages: wall_time (1, double), step (2,
 * int64), file_version (3, string: "brain.Event:2" in the first record),
 * summary (5: Summary.value (1) {tag (1), simple_value (2, float)}) and
 * session_log (7: SessionLog.status (1) = START; 6 is the deprecated
 * log_message). No library: protobuf-c
 * would need code generated from the .proto files for these two messages,
 * a build step and a dependency for some forty lines of encoding.
 *
 * Resume: every start writes a new file, named to sort after every event
 * file already in the directory (TensorBoard reads them in name order),
 * which begins with a SessionLog START at the step the run continues from;
 * TensorBoard then drops what it read before with step >= that step (its
 * purge of orphaned data: event_accumulator's _Purge keeps x.step <
 * START's step, for file_version >= 2; the plugin accumulator skips the
 * first START it sees, which has nothing before it here), and this file
 * writes again the records that metrics.jsonl kept at that step. What
 * TensorBoard shows is thus the cut-back metrics.jsonl, one value per tag
 * and step. */
#ifndef HGRN_TBOARD_H
#define HGRN_TBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

typedef struct Tboard Tboard;

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes,
 * continuing from crc (0 to start). */
uint32_t tboard_crc32c(uint32_t crc, const void *data, size_t n);

/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 */
uint32_t tboard_mask_crc(uint32_t crc);

/* The TFRecord of n data bytes into out (n + 16 bytes); returns n + 16. */
size_t tboard_frame(uint8_t *out, const void *data, size_t n);

/* Event messages into out (cap bytes); each returns its length, or 0 when
 * cap is too small. */
size_t tboard_event_version(uint8_t *out, size_t cap, double wall_time);
size_t tboard_event_start(uint8_t *out, size_t cap, double wall_time, int64_t step);
size_t tboard_event_scalars(uint8_t *out, size_t cap, double wall_time, int64_t step, const char *const *tags,
                            const float *values, int n);

/* The scalars of one metrics.jsonl record (a flat JSON object, no
 * newline): every key with a number value but "step", as the tag
 * "train/KEY" (training records) or "eval/KEY" (records with "val_top1"),
 * into tags[max][64] and values; *step its "step". Returns how many, 0 for
 * records with no scalars (the start records, {"event": ...}), -1 when
 * the text is not such an object or has no integer "step". */
int tboard_parse_record(const char *json, size_t len, int64_t *step, char (*tags)[64], float *values, int max);

/* Open a new event file in dir for a process that trains from start_step:
 * its version and START records, then the scalars of the records at
 * start_step that metrics_path holds (a resume's cut-back metrics.jsonl;
 * none for a fresh run). NULL with a message when it cannot be created or
 * written. */
Tboard *tboard_open(const char *dir, int start_step, const char *metrics_path, char *err, size_t errlen);

/* Write one metrics record's scalars. A failing write (disk full) is
 * reported once per streak on stderr and training goes on; a record is
 * written whole or not at all. */
void tboard_record(Tboard *tb, const char *json, size_t len);

/* The file's path (for messages and tests). */
const char *tboard_path(const Tboard *tb);

void tboard_close(Tboard *tb);

/* With train.tensorboard = 1: open the event file beside mt's
 * metrics.jsonl (already opened and cut back) and attach it, so that
 * every metrics_write writes its scalars too. 0, or -1 with a message. */
int tboard_attach(Metrics *mt, const char *dir, int start_step, char *err, size_t errlen);

#endif

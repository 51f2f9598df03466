/* write_streak.h - records that keep being written when writes fail (a full
 * disk must not stop training): the first failure of a streak is one warning
 * on stderr, the records lost meanwhile are counted, and the first success
 * after it says how many were lost. metrics.jsonl and the TensorBoard event
 * file each keep one. */
#ifndef HGRN_WRITE_STREAK_H
#define HGRN_WRITE_STREAK_H

typedef struct {
    int failing; /* the last write failed (its warning was printed) */
    long lost; /* records not written in this streak */
} WriteStreak;

/* After one record's write to path: written (ok = 1), or failed (ok = 0,
 * errno says why). */
void write_streak_note(WriteStreak *w, const char *path, int ok);

#endif

/*
 * Spin model of haltpoll::Parker (src/lib/parking_word.cpp) guarding a separate queue: producers push a
 * task and unpark(); the owner takes every queued task and parks when there is none. Spin explores
 * every interleaving (sequential consistency; the C++ code's acquire/release argument for the
 * payload is in docs/design.md). A lost wake-up leaves the owner blocked in FUTEX_WAIT after every
 * producer has finished: Spin reports that as an invalid end state. The final assertion checks that
 * every task was consumed exactly once.
 *
 * Each statement below is one atomic step of the C++ code: a load, a store, an RMW (exchange,
 * compare-exchange, fetch_add), or a futex system call (which the kernel makes atomic with respect
 * to the word: FUTEX_WAIT compares and enqueues under the hash-bucket lock; FUTEX_WAKE dequeues).
 *
 * The owner may also be woken spuriously (EINTR, a stale FUTEX_WAKE) up to SPURIOUS times; the
 * bound keeps a lost wake-up observable as a deadlock.
 *
 * Mutants (spin -D...) show that the model can fail; CTest runs BROKEN_ENTRY, the others by hand
 * (spin -DBROKEN_WAKE -a parker.pml && cc -DSAFETY -o pan pan.c && ./pan): BROKEN_STORE
 * parks with a plain store instead of the compare-exchange (overwrites a NOTIFIED), BROKEN_WAKE
 * never calls FUTEX_WAKE, BROKEN_ENTRY announces POLLING with a plain store (overwrites a
 * notification that arrived after the owner found the queue empty).
 */
#ifndef NPROD
#define NPROD 2
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef SPURIOUS
#define SPURIOUS 2
#endif
#define TOTAL (NPROD * ITEMS)

#define EMPTY    0
#define NOTIFIED 1
#define POLLING  2
#define PARKED   3

byte word = EMPTY;     /* the futex word */
byte queued = 0;       /* tasks pushed and not yet taken (the MPSC queue) */
byte consumed = 0;     /* tasks the owner ran */
bool enqueued = false; /* the owner is on the futex's wait queue */
byte spurious = 0;     /* spurious wake-ups so far: bounded, or a blocked owner could always escape */

active proctype Owner()
{
  byte old;
  do
  :: consumed == TOTAL -> break
  :: else ->
     /* take_all(): one exchange on the queue head */
     if
     :: queued > 0 -> atomic { consumed = consumed + queued; queued = 0 }
     :: else ->
        /* park(window) */
#ifdef BROKEN_ENTRY
        old = EMPTY;
        word = POLLING;                                                                  /* wrong: may overwrite NOTIFIED */
#else
        atomic { old = word; if :: word == EMPTY -> word = POLLING :: else -> skip fi }  /* CAS EMPTY->POLLING */
#endif
        if
        :: old != EMPTY -> assert(old == NOTIFIED); goto consume                        /* already notified */
        :: else -> skip
        fi;
        /* poll through the barrier: the window may run out at any moment */
        if
        :: word == NOTIFIED -> goto consume                                              /* poll hit */
        :: true -> skip                                                                  /* timeout */
        fi;
#ifdef BROKEN_STORE
        word = PARKED;                                                                   /* wrong: may overwrite NOTIFIED */
        old = POLLING;
#else
        atomic { old = word; if :: word == POLLING -> word = PARKED :: else -> skip fi } /* CAS POLLING->PARKED */
#endif
        if
        :: old != POLLING -> assert(old == NOTIFIED); goto consume                      /* hit at the boundary */
        :: else -> skip
        fi;
wait_loop:
        if
        :: word != PARKED -> goto consume                                                /* acquire load */
        :: else -> skip
        fi;
        atomic { if :: word == PARKED -> enqueued = true :: else -> skip fi }            /* FUTEX_WAIT(PARKED) */
        if
        :: !enqueued -> skip                                                             /* woken, or EAGAIN */
        :: enqueued && spurious < SPURIOUS -> spurious++; enqueued = false              /* spurious wake-up */
        fi;
        goto wait_loop;
consume:
        assert(word == NOTIFIED);
        word = EMPTY                                                                     /* exchange(EMPTY) */
     fi
  od;
  assert(consumed == TOTAL && queued == 0)
}

active [NPROD] proctype Producer()
{
  byte i = 0;
  byte old;
  do
  :: i < ITEMS ->
     queued++;                                                                           /* push (RMW) */
     atomic { old = word; word = NOTIFIED };                                             /* unpark: exchange */
#ifdef BROKEN_WAKE
     skip;
#else
     if
     :: old == PARKED -> atomic { if :: enqueued -> enqueued = false :: else -> skip fi } /* FUTEX_WAKE(1) */
     :: else -> skip                                                                     /* no syscall */
     fi;
#endif
     i++
  :: else -> break
  od
}
